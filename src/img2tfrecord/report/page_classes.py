"""The page's class section: how each split's examples spread over the classes, and a table of the classes.

Per split: the count's min / median / max per class, the smallest and
largest classes, and a bar per class where classes are few
(:data:`MAX_CLASSES_CHARTED`), a histogram of the counts where they are many.
Then one table, a row per class, that sorts by any column and filters by name
(a few lines of plain script, no library, nothing fetched); past
:data:`MAX_CLASS_ROWS` classes it holds the smallest and the largest by total
(every class is in the classes lines file).
"""

from __future__ import annotations

from typing import Any, List, Mapping, Sequence

from img2tfrecord.report import svg
from img2tfrecord.report.html_common import e, num, split_badge

MAX_CLASSES_CHARTED = 50
MAX_CLASS_ROWS = 2000

STYLE = """
.scroll{max-height:420px;overflow:auto;border:1px solid #e5e8ec;border-radius:6px;display:inline-block}
table.sortable th{cursor:pointer;position:sticky;top:0;user-select:none}table.sortable th:hover{background:#e3e7ec}
table.sortable th[data-dir=asc]::after{content:" ▲"}table.sortable th[data-dir=desc]::after{content:" ▼"}
#class-filter{margin:6px 0;padding:3px 6px;width:240px}
"""

# Sorts a table.sortable by the clicked column (numbers by value), and filters #class-counts by class name.
SCRIPT = """
(function () {
  function value(cell, numeric) {
    var text = cell.textContent;
    return numeric ? Number(text.replace(/[^0-9.-]/g, '')) : text.toLowerCase();
  }
  document.querySelectorAll('table.sortable').forEach(function (table) {
    var heads = table.tHead.rows[0].cells;
    Array.prototype.forEach.call(heads, function (th, column) {
      th.addEventListener('click', function () {
        var numeric = th.getAttribute('data-sort') === 'num';
        var current = th.getAttribute('data-dir');  // numbers sort largest first, names A to Z, then it flips
        var descending = current ? current === 'asc' : numeric;
        Array.prototype.forEach.call(heads, function (h) { h.removeAttribute('data-dir'); });
        th.setAttribute('data-dir', descending ? 'desc' : 'asc');
        var body = table.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        rows.sort(function (a, b) {
          var x = value(a.cells[column], numeric), y = value(b.cells[column], numeric);
          return (x < y ? -1 : x > y ? 1 : 0) * (descending ? -1 : 1);
        });
        var fragment = document.createDocumentFragment();
        rows.forEach(function (row) { fragment.appendChild(row); });
        body.appendChild(fragment);
      });
    });
  });
  var filter = document.getElementById('class-filter');
  if (filter) {
    filter.addEventListener('input', function () {
      var wanted = filter.value.toLowerCase();
      Array.prototype.forEach.call(document.getElementById('class-counts').tBodies[0].rows, function (row) {
        row.style.display = row.cells[0].textContent.toLowerCase().indexOf(wanted) >= 0 ? '' : 'none';
      });
    });
  }
})();
"""


def table_rows(rows: Sequence[Mapping[str, Any]]) -> List[Mapping[str, Any]]:
    """The rows the table holds: all of them, or past :data:`MAX_CLASS_ROWS` the smallest and largest by total."""
    if len(rows) <= MAX_CLASS_ROWS:
        return list(rows)
    ranked = sorted(rows, key=lambda r: (r["total"], r["class"]))
    half = MAX_CLASS_ROWS // 2
    return ranked[:half] + ranked[-half:]


def _spread(split: str, splits: Sequence[str], info: Mapping[str, Any]) -> str:
    spread, imb = info["classes"], info["imbalance"]
    if imb["ratio"] is not None:
        ratio = (
            f'imbalance ratio (largest / smallest class) <b class="imbalance" data-split="{e(split)}">'
            f"{imb['ratio']:g}</b>: {e(imb['largest'])} / {e(imb['smallest'])}"
        )
    elif imb["empty_class_count"]:
        named = ", ".join(imb["empty_classes"][:10])
        more = f" and {imb['empty_class_count'] - 10} more" if imb["empty_class_count"] > 10 else ""
        ratio = f"imbalance ratio undefined: no examples of {e(named)}{more}"
    else:
        ratio = "no classes"
    declared = ""
    if info["num_examples"] != info["declared_examples"]:
        declared = f' <span class="warn">dataset.json declares {num(info["declared_examples"])}</span>'
    extremes = ""
    if spread["classes"]:
        smallest = ", ".join(f"{e(x['class'] or '(unlabeled)')} ({num(x['count'])})" for x in spread["smallest"])
        largest = ", ".join(f"{e(x['class'] or '(unlabeled)')} ({num(x['count'])})" for x in spread["largest"])
        extremes = (
            f'<p class="spread" data-split="{e(split)}">{num(spread["classes"])} classes; examples per class: '
            f"min {num(spread['min'])}, median {num(spread['median'])}, max {num(spread['max'])}</p>"
            f'<p class="muted">smallest: {smallest}<br>largest: {largest}</p>'
        )
    return (
        f"<h3>{split_badge(split, splits)} {num(info['num_examples'])} examples{declared}</h3><p>{ratio}</p>{extremes}"
    )


def _chart(split: str, index: int, info: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> str:
    color = svg.split_color(split, index)
    if len(rows) <= MAX_CLASSES_CHARTED:
        bars = [svg.Bar(r["class"] or "(unlabeled)", r["examples"].get(split, 0), color) for r in rows]
        return svg.horizontal_bars(bars, title=f"examples per class, {split}")
    bins = info["classes"]["histogram"]
    bars = []
    for b in bins:
        low, high = round(b["low"], 1), round(b["high"], 1)
        label = f"{low:g}" if low == high else f"{low:g}–{high:g}"
        bars.append(svg.Bar(label, b["count"], color, f"{label} examples: {b['count']:,} classes"))
    return (
        '<p class="muted">classes by their number of examples</p>'
        f'<div class="class-histogram" data-split="{e(split)}">'
        + svg.columns(bars, axis_label="examples per class")
        + "</div>"
    )


def _table(splits: Sequence[str], rows: Sequence[Mapping[str, Any]], classes_file: str) -> str:
    shown = table_rows(rows)
    head = "".join(f'<th class="num" data-sort="num">{split_badge(s, splits)}</th>' for s in splits)
    body = []
    for r in shown:
        c = r["class"]
        cells = "".join(
            f'<td class="num" data-split="{e(s)}" data-class="{e(c)}">{num(r["examples"].get(s, 0))}</td>'
            for s in splits
        )
        total = f'<td class="num">{num(r["total"])}</td>'
        body.append(f'<tr data-class="{e(c)}"><td>{e(c or "(unlabeled)")}</td>{cells}{total}</tr>')
    note = (
        f'<p class="muted" id="class-rows-note">{num(len(shown))} of {num(len(rows))} classes shown: the '
        f"{num(len(shown) // 2)} smallest and largest by total; every class is in <code>{e(classes_file)}</code></p>"
        if len(shown) < len(rows)
        else f'<p class="muted">{num(len(rows))} classes; click a column to sort</p>'
    )
    return (
        f'<h3>Every class</h3>{note}<input id="class-filter" type="search" placeholder="filter by class name">'
        '<div class="scroll"><table id="class-counts" class="sortable">'
        f'<thead><tr><th data-sort="text">class</th>{head}'
        f'<th class="num" data-sort="num">total</th></tr></thead><tbody>{"".join(body)}</tbody></table></div>'
    )


def section(document: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> str:
    """The class section, from report.json's document and the class rows (every class)."""
    splits = list(document["splits"])
    out = ['<section id="classes"><h2>Examples per class</h2>']
    for i, split in enumerate(splits):
        info = document["splits"][split]
        out.append(_spread(split, splits, info) + _chart(split, i, info, rows))
    out.append(_table(splits, rows, document["files"]["classes"]["file"]))
    out.append("</section>")
    return "".join(out)
