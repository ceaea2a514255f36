"""The one HTML template and stylesheet of every kvreplay page.

Three pages use it: the run report (``report.document.to_html``), the A/B
report (``report.abreport.render_ab_html``) and the experiment's publication
(``experiments.publish.render_html``). Each page is self-contained: the style is
inline (``CSS``), there is no script and no external resource. Values are
escaped with ``escape`` by the renderers; the page is written through the
output sink (``safe_io.write_html``: secrets redacted, control characters
escaped, atomic).

Table cells carry ``data-status="measured|failed|deferred|absent|aborted"``;
tables of numbers take ``class="num"`` (right-aligned, one line per cell),
tables of key/value text ``class="kv"``; a plain table is left-aligned text
that wraps. A status rule outranks the table's alignment (a failed cell wraps
its reason, left-aligned).
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from typing import Any

__all__ = ["CSS", "escape", "page"]

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:1.5em auto;max-width:1360px;
padding:0 1em;color:#222}
h1{font-size:1.5em}h2{font-size:1.2em;border-bottom:1px solid #ddd;margin-top:1.6em}
table{border-collapse:collapse;margin:.5em 0 1em;font-size:.85em}
th,td{border:1px solid #ccc;padding:.2em .5em;text-align:left;vertical-align:top}
th{background:#f3f3f3}
table.num th,table.num td{text-align:right;white-space:nowrap;vertical-align:middle}
table.num th[scope=row]{text-align:left}
thead th{white-space:normal;vertical-align:bottom;min-width:4em;max-width:11em}
table.num thead th{white-space:normal;vertical-align:bottom}
table.kv td{white-space:normal;overflow-wrap:anywhere;text-align:left;max-width:40em}
table td[data-status=failed],table td[data-status=aborted]{background:#fde8e8;color:#8a1c1c;white-space:normal;
max-width:22em;text-align:left}
table td[data-status=absent]{background:#eef2fb;color:#3a4a6b;white-space:normal;max-width:22em;text-align:left}
table td[data-status=deferred]{background:#eee;color:#666;font-style:italic;white-space:normal;max-width:22em;
text-align:left}
figure{display:inline-block;margin:.5em;vertical-align:top;max-width:100%}
figure img{max-width:100%;height:auto}
figure[data-status=failed] .nofig,figure[data-status=deferred] .nofig{width:420px;height:120px;
display:flex;align-items:center;justify-content:center;border:1px dashed #aaa;padding:.5em}
figure[data-status=failed] .nofig{background:#fde8e8}
figure[data-status=deferred] .nofig{background:#eee}
figcaption{font-size:.8em;color:#555;max-width:680px}
.banner{background:#fff4d6;border-left:4px solid #e0a800;padding:.4em .8em;margin:.4em 0}
.verdict{font-size:1.3em;font-weight:bold}
.finding{margin:.4em 0}.next{color:#225}.legend span{padding:0 .4em;margin-right:.5em}
dl{display:grid;grid-template-columns:max-content minmax(0,1fr);gap:.1em 1em}
dd{margin:0;overflow-wrap:anywhere}
.scroll{overflow-x:auto;max-width:100%}
pre{font-size:.75em;background:#f8f8f8;padding:.5em;overflow:auto}
pre.log{max-height:12em}
"""
"""The one stylesheet of every page (inline in its ``<style>``)."""


def escape(x: Any) -> str:
    """``str(x)`` escaped for HTML text and quoted attribute values (``&``, ``<``, ``>``, ``"``, ``'``)."""
    return html.escape(str(x), quote=True)


def page(title: str, body: Iterable[str]) -> str:
    """One self-contained page: doctype, ``<head>`` (charset, title, ``CSS``), ``body``'s parts, one per line.

    Args:
        title: Page title, plain text (escaped here).
        body: HTML fragments, already escaped, in order.

    Returns:
        The page, ending with ``</body></html>`` and a newline.
    """
    head = (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">\n<title>{escape(title)}</title>\n'
            f"<style>{CSS}</style></head><body>")
    return "\n".join([head, *body, "</body></html>"]) + "\n"
