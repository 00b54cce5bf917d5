"""``dataset.json``'s ``generations``: what each run that wrote into an output added to it.

The first run of an output is generation 0; each ``convert --append`` adds the next, with its own
shards (``manifest.shard_file_name(..., generation=N)``), error report and input ledger. The
manifest's splits and accounting always cover every generation.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict

from img2tfrecord.schemas.manifest_fields import count, counts, fail, obj, string


@dataclasses.dataclass(frozen=True)
class Generation:
    """One run's part of an output: its inputs (``ledger``), where they went and what it rejected (``errors``).

    ``inputs == written + rejected`` for the generation; ``shards`` counts the shard files it added per
    split; ``analyzed``: the manifest's tf.Transform statistics include its train records.
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
        }
