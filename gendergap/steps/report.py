"""The report step: the study's tables and plots from the results DB (`gendergap report`)."""
from __future__ import annotations

from dataclasses import dataclass

from gendergap.steps.base import Step


@dataclass(kw_only=True)
class ReportStep(Step):
    KIND = "report"
    db: str
    out: str
    registry: str
    subset: str

    def run(self) -> None:
        from analysis.report import write_report

        for path in write_report(self.db, self.out, subset=self.subset, registry=self.registry).values():
            print(f"wrote {path}", flush=True)
