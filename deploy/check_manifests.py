"""Lints and renders the Helm chart with the Helm Go library, and validates every manifest against
the Kubernetes API's schemas (strict: unknown fields fail).

Run by deploy/check.sh and tests/deploy/test_artefacts.py in a tools venv, not the project's:
``pip install helm-python-sdk kubernetes-validate`` (helm-python-sdk ships Helm v4's Go code as a
shared library: lint, client-side install dry-run and rendering, i.e. ``helm lint`` and
``helm template``, without a helm binary). Exits 1 naming each failure.

Usage: check_manifests.py [--kube-version 1.30.0] [--out DIR]
"""

import argparse
import json
import os
import sys
from pathlib import Path

import helm_python as helm
import kubernetes_validate
import yaml

DEPLOY = Path(__file__).resolve().parent
CHART = DEPLOY / "helm" / "klique"
TEST_VALUES = CHART / "ci" / "test-values.yaml"
OPERATOR_GROUPS = ("monitoring.coreos.com/",)
KUSTOMIZE = DEPLOY / "kubernetes"


def documents(text: str) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kube-version", default="1.30.0")
    parser.add_argument("--out", type=Path, help="write the rendered manifests here")
    parser.add_argument(
        "--set-json", default="{}", help="values merged over the test values (top-level keys)"
    )
    args = parser.parse_args()
    failures: list[str] = []
    values = {**yaml.safe_load(TEST_VALUES.read_text()), **json.loads(args.set_json)}
    print(f"Helm library {helm.helm_sdk_version()} (helm-python-sdk {helm.helm_c_version()})")

    report = helm.lint(str(CHART), values, strict=True, kube_version=f"v{args.kube_version}")
    for message in report["messages"]:
        level = {1: "INFO", 2: "WARNING", 3: "ERROR"}.get(message["severity"], "UNKNOWN")
        print(f"lint {level}: {message['path']}: {message['error']}")
        if message["severity"] >= 2:
            failures.append(f"helm lint: {message['path']}: {message['error']}")
    failures += [f"helm lint: {error}" for error in report["errors"]]

    # The install-time rendering of `helm template` (client-side dry run: no cluster is asked).
    os.environ["KUBECONFIG"] = os.devnull
    with helm.Config(namespace="klique") as config:
        release = config.install(str(CHART), "klique", values, dry_run="client")
    install_docs = documents(release["manifest"])
    # Every template, hooks included (the dry run's manifest leaves the hooks out).
    rendered = helm.Chart.load(str(CHART)).render(values, name="klique", namespace="klique", is_install=True)
    chart_docs = [
        doc
        for name, text in sorted(rendered.items())
        if not name.endswith("NOTES.txt")
        for doc in documents(text)
    ]
    print(f"chart: {len(install_docs)} objects installed, {len(chart_docs)} with the hooks")
    kustomize_docs = [doc for path in sorted(KUSTOMIZE.glob("*.yaml")) for doc in documents(path.read_text())]
    kustomize_docs = [doc for doc in kustomize_docs if doc.get("kind") != "Kustomization"]

    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "chart.yaml").write_text(yaml.safe_dump_all(chart_docs, sort_keys=False))

    for source, docs in (("chart", chart_docs), ("deploy/kubernetes", kustomize_docs)):
        for doc in docs:
            name = f"{source}: {doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
            if doc.get("apiVersion", "").startswith(OPERATOR_GROUPS):
                continue  # a custom resource: no schema of it ships with Kubernetes
            try:
                kubernetes_validate.validate(doc, args.kube_version, strict=True)
            except kubernetes_validate.ValidationError as error:
                failures.append(f"{name}: {'.'.join(map(str, error.path))}: {error.message}")
        print(f"{source}: {len(docs)} objects validated against Kubernetes {args.kube_version} (strict)")

    kinds = sorted({doc["kind"] for doc in chart_docs})
    print("chart kinds:", ", ".join(kinds))
    for failure in failures:
        print("FAIL", failure, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
