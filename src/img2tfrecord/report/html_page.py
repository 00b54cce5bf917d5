"""``report.html``: the report document as one self-contained page, of bounded size whatever the dataset.

No external resource: styles and the one small script (sorting the class
table) are inline, charts are inline SVG and thumbnails ``data:`` URIs, so the
page opens offline and from any location. What could grow with the data is
capped: thumbnails (the sample, :data:`MAX_GROUPS_SHOWN` groups of at most
:data:`MAX_CONTENTS_SHOWN` images), rows (classes, rejects, problems); the
page says where the rest is (the JSON-lines files). Elements carry ``data-*``
attributes (split, class, reason, kind) so tools and tests can find the facts
in the DOM.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from img2tfrecord.report import duplicates as dup
from img2tfrecord.report import page_classes, svg
from img2tfrecord.report.facts import MAX_REJECTS_PER_REASON_KEPT
from img2tfrecord.report.html_common import e as _e
from img2tfrecord.report.html_common import num as _num
from img2tfrecord.report.html_common import size_text as _bytes
from img2tfrecord.report.html_common import split_badge as _split_badge
from img2tfrecord.schemas import output_files

MAX_GROUPS_SHOWN = 50
MAX_CONTENTS_SHOWN = 8  # images (with thumbnails) shown per group
MAX_RECORDS_PER_CONTENT_SHOWN = 8
MAX_REJECTS_PER_REASON_SHOWN = MAX_REJECTS_PER_REASON_KEPT
MAX_PROBLEMS_SHOWN = 50
THUMBNAIL_BYTES = 5_000_000  # embedded pictures per page, at most: the groups' first, then the sample's

_STYLE = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1d2430;background:#f6f7f9}
header{background:#1d2430;color:#fff;padding:18px 28px}header h1{margin:0 0 4px;font-size:22px}
header p{margin:2px 0;color:#c9d1dc}main{padding:8px 28px 40px;max-width:1200px}
section{background:#fff;border:1px solid #dde2e8;border-radius:8px;padding:14px 20px;margin:18px 0}
h2{font-size:18px;margin:4px 0 10px}h3{font-size:15px;margin:14px 0 6px}
table{border-collapse:collapse;margin:6px 0}td,th{border-bottom:1px solid #e5e8ec;padding:3px 10px;text-align:left;vertical-align:top}
th{background:#f0f2f5}td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
.cards{display:flex;flex-wrap:wrap;gap:10px}.card{background:#fff;border:1px solid #dde2e8;border-radius:8px;padding:8px 14px;min-width:120px}
.card b{display:block;font-size:20px}.warn{background:#fff4e5;border:1px solid #f0b35b;border-radius:6px;padding:8px 12px;margin:8px 0}
.bad{background:#fdecea;border-color:#e57373}.ok{color:#2e7d32}.muted{color:#667}
.split{display:inline-block;border-radius:4px;padding:0 6px;color:#fff;font-size:12px;margin-right:4px}
.grid{display:flex;flex-wrap:wrap;gap:8px}.thumb{width:112px;font-size:11px;word-break:break-all}
.thumb img{display:block;width:96px;height:96px;object-fit:contain;background:#eee;border-radius:4px}
.group{border:1px solid #dde2e8;border-radius:6px;padding:8px 12px;margin:10px 0}.group.crossing{border-color:#e57373;background:#fffafa}
.contents{display:flex;flex-wrap:wrap;gap:14px}.content{max-width:360px}.content img{display:block;margin:4px 0}.content ul{margin:4px 0;padding-left:18px}
svg.chart text{font:12px sans-serif;fill:#1d2430}svg.chart text.tick{font-size:10px;fill:#556}
code{font-size:12px}details summary{cursor:pointer;font-weight:600}
"""


@dataclasses.dataclass
class Pictures:
    """Thumbnails for the page: the class samples by ``(split, filename)``, group contents by sha256.

    ``spent`` counts the bytes embedded so far: past :data:`THUMBNAIL_BYTES` a picture is left out (its
    caption stays), so that the page stays small whatever the pictures weigh.
    """

    samples: Dict[Tuple[str, str], str] = dataclasses.field(default_factory=dict)
    contents: Dict[str, str] = dataclasses.field(default_factory=dict)
    spent: int = 0

    def _take(self, uri: Optional[str]) -> Optional[str]:
        if uri is None or self.spent + len(uri) > THUMBNAIL_BYTES:
            return None
        self.spent += len(uri)
        return uri

    def sample(self, split: str, filename: str) -> Optional[str]:
        return self._take(self.samples.get((split, filename)))

    def content(self, sha256: str) -> Optional[str]:
        return self._take(self.contents.get(sha256))


def _header(document: Mapping[str, Any]) -> str:
    ds, read = document["dataset"], document["read"]
    opts = ds.get("options") or {}
    size = opts.get("image_size")
    stored = f"{size[0]}×{size[1]}" if size else "original sizes"
    rate = f", {read['images_per_second']:,.0f} images/s" if read.get("images_per_second") else ""
    return (
        f"<header><h1>Dataset report: {_e(ds['path'])}</h1>"
        f"<p>created {_e(ds.get('created'))} by img2tfrecord {_e(ds.get('tool_version'))} from {_e(ds.get('input'))}</p>"
        f"<p>{_num(read['records'])} records read from {_num(read['shards'])} shards in "
        f"{read.get('seconds', 0):.1f} s with {read.get('processes', 1)} process(es){rate}; "
        f"images {stored}, format {_e(opts.get('format'))}</p></header>"
    )


def _warnings(document: Mapping[str, Any]) -> str:
    out = []
    if not document["dataset"]["complete"]:
        out.append(
            '<div class="warn bad" id="incomplete">No <code>_SUCCESS</code> file: the conversion did not '
            "finish, and this report shows only what its files hold.</div>"
        )
    problems = document["read"]["problems"]
    if problems:
        items = "".join(f"<li>{_e(p)}</li>" for p in problems[:MAX_PROBLEMS_SHOWN])
        unlisted = document["read"]["problem_count"] - min(len(problems), MAX_PROBLEMS_SHOWN)
        more = f"<li>… and {_num(unlisted)} more (report.json lists some of them)</li>" if unlisted > 0 else ""
        out.append(
            f'<div class="warn bad" id="read-problems"><b>Could not read everything</b> '
            f"(run <code>img2tfrecord verify</code> for every check):<ul>{items}{more}</ul></div>"
        )
    return "".join(out)


def _cards(document: Mapping[str, Any]) -> str:
    d = document["duplicates"]
    cross = d["exact"]["cross_split_pairs"] + d["near"]["cross_split_pairs"]
    cards = [
        ("records", document["read"]["records"]),
        ("classes", len(document["dataset"]["labels"])),
        ("splits", len(document["splits"])),
        ("rejected inputs", document["rejected"]["total"]),
        ("exact duplicate groups", d["exact"]["groups"]),
        ("near-duplicate groups", d["near"]["groups"]),
        ("duplicate pairs across splits", cross),
    ]
    return (
        '<div class="cards">'
        + "".join(
            f'<div class="card" data-card="{_e(label)}"><b>{_num(value)}</b>{_e(label)}</div>' for label, value in cards
        )
        + "</div>"
    )


def _histogram_bars(bins: Sequence[Mapping[str, Any]], color: str, unit: str = "") -> List[svg.Bar]:
    bars = []
    for b in bins:
        low, high = round(b["low"], 2), None if b["high"] is None else round(b["high"], 2)
        label = f"≥{low:g}" if high is None else f"{low:g}" if low == high else f"{low:g}–{high:g}"
        bars.append(svg.Bar(label, b["count"], color, f"{label}{unit}: {b['count']:,} images"))
    return bars


def _sizes(document: Mapping[str, Any]) -> str:
    splits = list(document["splits"])
    out = [
        '<section id="sizes"><h2>Stored image sizes and aspect ratios</h2>',
        '<p class="muted">From each record\'s image/width and image/height.</p>',
    ]
    for i, split in enumerate(splits):
        img = document["splits"][split]["images"]
        color = svg.split_color(split, i)
        out.append(f"<h3>{_split_badge(split, splits)} {img['distinct_sizes']} distinct size(s)</h3>")
        if not img["width"]:
            out.append('<p class="muted">no records</p>')
            continue
        w, h, a = img["width"], img["height"], img["aspect_ratio"]
        out.append(
            f"<p>width {w['min']}–{w['max']} (median {w['median']:g}), height {h['min']}–{h['max']} "
            f"(median {h['median']:g}), aspect ratio w/h {a['min']:g}–{a['max']:g} (median {a['median']:g})</p>"
        )
        common = [svg.Bar(f"{s['width']}×{s['height']}", s["count"], color) for s in img["most_common"]]
        out.append("<p>most common sizes (W×H)</p>" + svg.horizontal_bars(common, title=f"sizes, {split}"))
        out.append(
            "<p>aspect ratio (width / height)</p>"
            + svg.columns(_histogram_bars(img["aspect_ratio_histogram"], color), axis_label="width / height")
        )
        if img["distinct_sizes"] > 1:
            out.append("<p>width (px)</p>" + svg.columns(_histogram_bars(img["width_histogram"], color, " px")))
            out.append("<p>height (px)</p>" + svg.columns(_histogram_bars(img["height_histogram"], color, " px")))
    out.append("</section>")
    return "".join(out)


def _thumb(item: Mapping[str, Any], uri: str, splits: Sequence[str], caption: str) -> str:
    return (
        f'<div class="thumb" data-split="{_e(item["split"])}" data-class="{_e(item["class"])}">'
        f'<img src="{uri}" alt="{_e(item["filename"])}">{_split_badge(item["split"], splits)}{_e(caption)}</div>'
    )


def _samples(document: Mapping[str, Any], pictures: Pictures) -> str:
    splits = list(document["splits"])
    samples = document["samples"]
    seed = _e(document["options"].get("seed"))
    drawn: List[Tuple[Mapping[str, Any], str]] = []
    for item in samples["items"]:
        uri = pictures.sample(item["split"], item["filename"])
        if uri:
            drawn.append((item, uri))
    if samples["mode"] == "grid":
        out = [
            '<section id="samples"><h2>Samples</h2>',
            f'<p class="muted">A seeded sample (--seed {seed}): one image each of {len(drawn)} of the '
            f"{_num(len(document['dataset']['labels']) or 1)} classes, captioned with its class.</p>",
            '<div class="grid" id="sample-grid">',
            *(_thumb(item, uri, splits, item["class"] or "(unlabeled)") for item, uri in drawn),
            "</div>",
        ]
    else:
        out = [
            '<section id="samples"><h2>Samples per class</h2>',
            f'<p class="muted">A seeded sample (--seed {seed}) of each class, over all splits.</p>',
        ]
        by_class: Dict[str, List[str]] = {}
        for item, uri in drawn:
            by_class.setdefault(item["class"], []).append(_thumb(item, uri, splits, item["filename"]))
        for class_name, cells in by_class.items():
            out.append(
                f'<h3 data-class="{_e(class_name)}">{_e(class_name or "(unlabeled)")}</h3>'
                f'<div class="grid">{"".join(cells)}</div>'
            )
    if not drawn:
        out.append('<p class="muted">no sample (--thumbnails-per-class 0, or no readable image)</p>')
    out.append("</section>")
    return "".join(out)


def _pairs_table(section: Mapping[str, Any]) -> str:
    rows = []
    for kind in (dup.EXACT, dup.NEAR):
        for key, n in section[kind]["pairs"].items():
            a, b = key.split("/", 1)
            where = "across splits" if a != b else "within a split"
            rows.append(
                f'<tr class="pairs" data-kind="{kind}" data-pair="{_e(key)}"><td>{kind}</td>'
                f'<td>{_e(a)} – {_e(b)}</td><td>{where}</td><td class="num">{_num(n)}</td></tr>'
            )
    if not rows:
        return '<p class="ok">No duplicate pairs.</p>'
    return f'<table id="pair-counts"><tr><th>kind</th><th>splits</th><th></th><th class="num">pairs</th></tr>{"".join(rows)}</table>'


def _group(g: Mapping[str, Any], splits: Sequence[str], pictures: Pictures, lines_file: str) -> str:
    contents = []
    for c in g["contents"][:MAX_CONTENTS_SHOWN]:
        uri = pictures.content(c["sha256"])
        img = (
            f'<img src="{uri}" alt="{_e(c["records"][0]["filename"])}" width="96" height="96" style="object-fit:contain;background:#eee">'
            if uri
            else ""
        )
        shown = c["records"][:MAX_RECORDS_PER_CONTENT_SHOWN]
        members = "".join(
            f'<li class="member" data-split="{_e(r["split"])}" data-class="{_e(r["class"])}">{_split_badge(r["split"], splits)}'
            f'<span class="filename">{_e(r["filename"])}</span> <span class="muted">({_e(r["class"])})</span></li>'
            for r in shown
        )
        if len(c["records"]) > len(shown):
            members += f"<li>… {len(c['records']) - len(shown)} more ({_e(lines_file)})</li>"
        distance = (
            f'<span class="muted">distance {c["distance"]} · sha256 {_e(c["sha256"][:12])}…</span>'
            if g["kind"] == dup.NEAR
            else f'<span class="muted">sha256 {_e(c["sha256"][:12])}…</span>'
        )
        contents.append(f'<div class="content">{img}{distance}<ul>{members}</ul></div>')
    if len(g["contents"]) > MAX_CONTENTS_SHOWN:
        contents.append(
            f'<p class="muted">… {len(g["contents"]) - MAX_CONTENTS_SHOWN} more images ({_e(lines_file)})</p>'
        )
    pairs = ", ".join(f"{_e(k)}: {n}" for k, n in g["pairs"].items())
    classes = f" · classes differ: {_e(', '.join(g['classes']))}" if len(g["classes"]) > 1 else ""
    crossing = " crossing" if g["crosses_splits"] else ""
    spread = (
        f' · <span class="largest-distance">at most {g["largest_distance"]} bits from the first image</span>'
        if g["kind"] == dup.NEAR
        else ""
    )
    return (
        f'<div class="group{crossing}" data-kind="{g["kind"]}" data-crosses="{str(g["crosses_splits"]).lower()}">'
        f"<b>{g['kind']} duplicates</b>, {g['size']} records in {_e(', '.join(g['splits']))}{classes}{spread}"
        f'<div class="muted">pairs: {pairs}</div><div class="contents">{"".join(contents)}</div></div>'
    )


def _duplicates(document: Mapping[str, Any], pictures: Pictures) -> str:
    d = document["duplicates"]
    splits = list(document["splits"])
    groups = d["top_groups"][:MAX_GROUPS_SHOWN]
    lines_file = document["files"]["duplicates"]["file"]
    total = d["exact"]["groups"] + d["near"]["groups"]
    out = [
        '<section id="duplicates"><h2>Duplicates and split leakage</h2>',
        "<p><b>Exact</b>: records with the same <code>image/key/sha256</code> (identical stored bytes). "
        f"<b>Near</b>: different bytes, each image's 64-bit difference hash at most {d['near_duplicate_distance']} "
        "bits from the group's first image's (--near-duplicate-distance; the distance is shown per image). "
        "Groups crossing splits first, then exact before near, larger first.</p>",
        f'<p id="leakage">duplicate pairs across splits: <b>{_num(d["exact"]["cross_split_pairs"])}</b> exact, '
        f"<b>{_num(d['near']['cross_split_pairs'])}</b> near</p>",
        f'<p id="group-counts">{_num(d["exact"]["groups"])} exact groups '
        f"({_num(d['exact']['groups_crossing_splits'])} crossing splits), {_num(d['near']['groups'])} near groups "
        f"({_num(d['near']['groups_crossing_splits'])} crossing splits); every group, with every record, is a line "
        f"of <code>{_e(lines_file)}</code></p>",
        _pairs_table(d),
    ]
    if d["records_not_hashed"]:
        out.append(
            f'<p class="warn">{d["records_not_hashed"]} record(s) whose image does not decode were checked for exact duplicates only.</p>'
        )
    for g in groups:
        out.append(_group(g, splits, pictures, lines_file))
    if total > len(groups):
        out.append(
            f'<p class="muted" id="more-groups">… {_num(total - len(groups))} more groups in {_e(lines_file)}</p>'
        )
    if not total:
        out.append('<p class="ok">No duplicate groups.</p>')
    out.append("</section>")
    return "".join(out)


def _rejected(document: Mapping[str, Any]) -> str:
    rej = document["rejected"]
    lines_file = document["files"]["rejected"]["file"]
    out = ['<section id="rejected"><h2>Rejected inputs</h2>']
    if not rej["by_reason"]:
        out.append('<p class="ok">No input was rejected.</p>')
    if rej["total"] != rej["declared"]:
        out.append(
            f'<p class="warn">errors.jsonl has {rej["total"]} rows, dataset.json counts {rej["declared"]} rejected inputs.</p>'
        )
    for reason, count in rej["by_reason"].items():
        shown = rej["shown"].get(reason, [])[:MAX_REJECTS_PER_REASON_SHOWN]
        rows = "".join(
            f'<tr class="reject" data-reason="{_e(reason)}"><td class="path">{_e(r["path"])}</td><td>{_e(r["error"])}</td></tr>'
            for r in shown
        )
        more = (
            f'<p class="muted">… {_num(count - len(shown))} more in {_e(lines_file)}</p>' if count > len(shown) else ""
        )
        out.append(
            f'<details open data-reason="{_e(reason)}"><summary>{_e(reason)}: {_num(count)}</summary>'
            f"<table><tr><th>path</th><th>message</th></tr>{rows}</table>{more}</details>"
        )
    out.append("</section>")
    return "".join(out)


def _shard_label(file_name: str) -> str:
    """``train-00003-of-00010.tfrecord`` -> ``train 3``: short enough to stand under a bar."""
    parsed = output_files.parse_shard_file_name(file_name)
    return f"{parsed['split'][:5]} {parsed['index']}" if parsed else file_name[:8]


def _withdrawn_note(row: Mapping[str, Any]) -> str:
    """`` (+n withdrawn)`` for a shard holding records ``--accept-changes`` withdrew, else ''."""
    return f" (+{_num(row['withdrawn'])} withdrawn)" if row.get("withdrawn") else ""


def _shards(document: Mapping[str, Any]) -> str:
    splits = list(document["splits"])
    rows = document["shards"]
    color = {s: svg.split_color(s, i) for i, s in enumerate(splits)}
    names = [_shard_label(r["file"]) for r in rows]
    record_bars = [
        svg.Bar(n, r["records"], color.get(r["split"], "#777"), f"{r['file']}: {r['records']:,} records")
        for n, r in zip(names, rows)
    ]
    byte_bars = [
        svg.Bar(n, r["bytes"] or 0, color.get(r["split"], "#777"), f"{r['file']}: {_bytes(r['bytes'])}")
        for n, r in zip(names, rows)
    ]
    table = "".join(
        f'<tr data-shard="{_e(r["file"])}"><td>{_e(r["file"])}</td><td class="num">{_num(r["records"])}'
        f"{_withdrawn_note(r)}</td>"
        f'<td class="num">{_bytes(r["bytes"])}</td><td>{"" if r["read_to_end"] and not r["problems"] else _e("; ".join(r["problems"][:3]))}</td></tr>'
        for r in rows
    )
    legend = " ".join(_split_badge(s, splits) for s in splits)
    return (
        f'<section id="shards"><h2>Shards</h2><p>{legend}</p><p>records per shard</p>{svg.columns(record_bars, axis_label="shard")}'
        f"<p>bytes per shard</p>{svg.columns(byte_bars, axis_label='shard')}"
        f'<details><summary>{len(rows)} shards</summary><table><tr><th>file</th><th class="num">records</th>'
        f'<th class="num">bytes</th><th>problems</th></tr>{table}</table></details></section>'
    )


def render(document: Mapping[str, Any], pictures: Pictures, class_rows: Sequence[Mapping[str, Any]]) -> str:
    """The whole page; ``class_rows`` are the classes lines file's rows (every class). Spends ``pictures``."""
    title = f"img2tfrecord report: {document['dataset']['path']}"
    return (
        "<!DOCTYPE html>\n"
        f'<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">'
        '<link rel="icon" href="data:,">'
        f"<title>{_e(title)}</title><style>{_STYLE}{page_classes.STYLE}</style></head><body>"
        + _header(document)
        + "<main>"
        + _warnings(document)
        + _cards(document)
        + page_classes.section(document, class_rows)
        + _duplicates(document, pictures)
        + _rejected(document)
        + _samples(document, pictures)
        + _sizes(document)
        + _shards(document)
        + f"</main><script>{page_classes.SCRIPT}</script></body></html>\n"
    )
