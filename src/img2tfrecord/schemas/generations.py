"""``dataset.json``'s ``generations``: what each run that wrote into an output added to it.

The first run of an output is generation 0; each ``convert --append`` adds the next, with its own
shards (``output_files.shard_file_name(..., generation=N)``), error report and input ledger. The
manifest's splits and accounting always cover every generation. A generation made with
``--accept-changes`` also withdraws the records of inputs changed or removed since: their shards
keep them, every reader skips them (:class:`Withdrawal`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, Optional, Tuple

from img2tfrecord.schemas.dataset_json_fields import count, counts, fail, obj, opt_string, string

CHANGED = "changed"  # the input was converted again into the withdrawing generation
REMOVED = "removed"  # the input is gone


@dataclasses.dataclass(frozen=True)
class Withdrawal:
    """A record no reader returns any more: record ``index`` of shard ``file`` (of split ``split``), written
    from ``relpath``, which was ``change`` (:data:`CHANGED` or :data:`REMOVED`); ``label``: its class name;
    ``boxes``: a detection record's objects per class; ``archive``: the archive (as the ledger names it)
    that held ``relpath``, which is what changed or went."""

    relpath: str
    split: str
    file: str
    index: int
    change: str
    label: Optional[str] = None
    boxes: Optional[Dict[str, int]] = None
    archive: Optional[str] = None

    @property
    def input(self) -> str:
        """The ledger key of what changed or went: the archive, else the record's own relpath."""
        return self.archive or self.relpath

    @classmethod
    def from_json(cls, doc: Any, where: str) -> Withdrawal:
        doc = obj(doc, where)
        change = string(doc.get("change"), f"{where}.change")
        if change not in (CHANGED, REMOVED):
            raise fail(f"{where}.change", f"is {change!r}; expected one of {CHANGED}, {REMOVED}")
        return cls(
            relpath=string(doc.get("relpath"), f"{where}.relpath"),
            split=string(doc.get("split"), f"{where}.split"),
            file=string(doc.get("file"), f"{where}.file"),
            index=count(doc.get("index"), f"{where}.index"),
            change=change,
            label=opt_string(doc.get("label"), f"{where}.label"),
            boxes=counts(doc["boxes"], f"{where}.boxes") if "boxes" in doc else None,
            archive=opt_string(doc.get("archive"), f"{where}.archive"),
        )

    def to_json(self) -> Dict[str, Any]:
        doc: Dict[str, Any] = {
            "relpath": self.relpath,
            "split": self.split,
            "file": self.file,
            "index": self.index,
            "change": self.change,
        }
        if self.label is not None:
            doc["label"] = self.label
        if self.boxes is not None:
            doc["boxes"] = dict(sorted(self.boxes.items()))
        if self.archive is not None:
            doc["archive"] = self.archive
        return doc


@dataclasses.dataclass(frozen=True)
class Generation:
    """One run's part of an output: its inputs (``ledger``), where they went and what it rejected (``errors``).

    ``inputs == written + rejected`` for the generation; ``withdrawn``: the earlier records it withdrew
    (``--accept-changes``); ``shards`` counts the shard files it added per
    split; ``analyzed``: the manifest's tf.Transform statistics include its train records; ``retried``:
    the earlier rejections, per reason, of the inputs it converted again, which leave the manifest's
    accounting (this generation counts those inputs) while their rows stay in the earlier error reports;
    ``resolved``: the relpaths of folders an earlier generation could not list that are listed now (their
    files are this generation's inputs), no longer recorded from here on.
    """

    number: int
    created: str
    ledger: str
    errors: str
    inputs: int
    written: int
    rejected: int
    shards: Dict[str, int]
    analyzed: bool
    withdrawn: Tuple[Withdrawal, ...] = ()
    retried: Dict[str, int] = dataclasses.field(default_factory=dict)
    resolved: Tuple[str, ...] = ()

    @classmethod
    def from_json(cls, doc: Any, where: str) -> Generation:
        doc = obj(doc, where)
        analyzed = doc.get("analyzed")
        if not isinstance(analyzed, bool):
            raise fail(f"{where}.analyzed", f"is {analyzed!r}, not true or false")
        return cls(
            number=count(doc.get("generation"), f"{where}.generation"),
            created=string(doc.get("created", ""), f"{where}.created"),
            ledger=string(doc.get("ledger"), f"{where}.ledger"),
            errors=string(doc.get("errors"), f"{where}.errors"),
            inputs=count(doc.get("inputs"), f"{where}.inputs"),
            written=count(doc.get("written"), f"{where}.written"),
            rejected=count(doc.get("rejected"), f"{where}.rejected"),
            shards=counts(doc.get("shards", {}), f"{where}.shards"),
            analyzed=analyzed,
            withdrawn=tuple(
                Withdrawal.from_json(w, f"{where}.withdrawn[{i}]") for i, w in enumerate(_list(doc, "withdrawn", where))
            ),
            retried=counts(doc.get("retried", {}), f"{where}.retried"),
            resolved=tuple(string(r, f"{where}.resolved[{i}]") for i, r in enumerate(_list(doc, "resolved", where))),
        )

    def to_json(self) -> Dict[str, Any]:
        return {
            "generation": self.number,
            "created": self.created,
            "ledger": self.ledger,
            "errors": self.errors,
            "inputs": self.inputs,
            "written": self.written,
            "rejected": self.rejected,
            "shards": dict(self.shards),
            "analyzed": self.analyzed,
            **({"withdrawn": [w.to_json() for w in self.withdrawn]} if self.withdrawn else {}),
            **({"retried": dict(sorted(self.retried.items()))} if self.retried else {}),
            **({"resolved": list(self.resolved)} if self.resolved else {}),
        }


def _list(doc: Dict[str, Any], key: str, where: str) -> list:
    value = doc.get(key, [])
    if not isinstance(value, list):
        raise fail(f"{where}.{key}", "is not a list")
    return value
