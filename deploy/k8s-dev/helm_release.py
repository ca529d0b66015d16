"""Install, upgrade or uninstall the chart deploy/helm/klique into a cluster with Helm's own Go
library (helm-python-sdk, in deploy/check.sh's tools venv), as `helm` would; prints the release as
JSON. For the chart's install test (tests/deploy/test_helm_install.py) and by hand:

    $KLIQUE_DEPLOY_TOOLS/bin/python deploy/k8s-dev/helm_release.py install KUBECONFIG NAMESPACE \\
        RELEASE values.yaml [more-values.json]
"""

import argparse
import json
import sys
from pathlib import Path

import helm_python
import yaml
from helm_python.errors import HelmError

CHART = Path(__file__).resolve().parents[1] / "helm" / "klique"


def merged(files: list[str]) -> dict:
    values: dict = {}
    for name in files:
        values = deep_merge(values, yaml.safe_load(Path(name).read_text()) or {})
    return values


def deep_merge(base: dict, extra: dict) -> dict:
    out = dict(base)
    for key, value in extra.items():
        out[key] = (
            deep_merge(out[key], value)
            if isinstance(value, dict) and isinstance(out.get(key), dict)
            else value
        )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["install", "upgrade", "uninstall", "status"])
    parser.add_argument("kubeconfig")
    parser.add_argument("namespace")
    parser.add_argument("release")
    parser.add_argument("values", nargs="*", help="values files (YAML or JSON), merged in order")
    parser.add_argument("--timeout", type=int, default=300)
    args = parser.parse_args()
    config = helm_python.Config(kubeconfig_path=args.kubeconfig, namespace=args.namespace)
    try:
        if args.action == "install":
            release = config.install(
                str(CHART), args.release, merged(args.values), namespace=args.namespace,
                create_namespace=True, wait="watcher", timeout=args.timeout,
            )  # fmt: skip
        elif args.action == "upgrade":
            release = config.upgrade(
                str(CHART), args.release, merged(args.values), namespace=args.namespace,
                wait="watcher", timeout=args.timeout,
            )  # fmt: skip
        elif args.action == "uninstall":
            release = config.uninstall(args.release, wait="watcher", timeout=args.timeout)
        else:
            release = config.status(args.release)
    except HelmError as error:
        print(f"helm {args.action} failed: {error}", file=sys.stderr)
        return 1
    print(json.dumps(release, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
