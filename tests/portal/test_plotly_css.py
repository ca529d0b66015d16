"""plotly.js writes its own stylesheet into a ``<style>`` element, which the Content-Security-Policy
forbids; given ``<link id="plotly.js-style-global" class="no-inline-styles">`` it leaves that to the
page. ``static/vendor/plotly.css`` holds the same rules, taken from the vendored bundle; when plotly
is upgraded, rewrite it with ``python tests/portal/test_plotly_css.py``."""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BUNDLE = ROOT / "static/vendor/plotly.min.js"
CSS = ROOT / "static/vendor/plotly.css"


def plotly_css() -> str:
    """The rules plotly.js would add, from its bundle: ``{selector: declarations}`` where X stands for
    the plot and Y for the notifier."""
    source = BUNDLE.read_text()
    call = re.search(r"\.addStyleRule\((\w+),(\w+)\[(\w+)\]\)", source)
    rules_name = call.group(2)
    start = source.rindex(f"{rules_name}={{", 0, call.start()) + len(rules_name) + 1
    end = source.index("};", start) + 1
    literal = re.sub(r"([{,])([XY]):", r'\1"\2":', source[start:end])
    rules = ast.literal_eval(literal)
    version = re.search(r"plotly\.js v[\d.]+", source).group()
    lines = [f"/* The stylesheet of {version}, for a Content-Security-Policy without inline styles. */"]
    for selector, declarations in rules.items():
        selector = selector.replace(",", ", ").replace("X", ".js-plotly-plot .plotly")
        lines.append(f"{selector.replace('Y', '.plotly-notifier')} {{{declarations}}}")
    return "\n".join(lines) + "\n"


def test_the_vendored_plotly_css_holds_the_rules_of_the_vendored_plotly_js():
    assert CSS.read_text() == plotly_css()


def test_the_charts_template_stands_in_for_each_stylesheet_the_bundle_would_inject():
    injected = re.findall(
        r'if\(!document\.getElementById\("([^"]+)"\)\)\{var \w+=document\.createElement\("style"\)',
        BUNDLE.read_text(),
    )
    template = (ROOT / "templates/portal/_plotly.html").read_text()
    assert injected and all(f'id="{element}"' in template for element in injected)


if __name__ == "__main__":
    CSS.write_text(plotly_css())
