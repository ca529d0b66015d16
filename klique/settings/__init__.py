"""Settings package: ``base`` (environment-driven defaults), ``test`` and ``production``."""
