"""Cloud providers: launch, describe and terminate the nodes of a cloud pool (no Django here;
the control plane's autoscaler drives them). See ``klique.cloud.providers`` and ``docs/cloud.md``."""
