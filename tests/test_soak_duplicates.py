"""bench/soak_duplicates.py's counting, on fabricated pieces of a kept soak folder (the
database part was run on real kept soaks, before and after durable steps)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "soak_duplicates.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("soak_duplicates", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["soak_duplicates"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


sd = _load()

REPORT = """\
taskboard-faults seed=7 jobs=40 completed=38 dead=2 lost_leases=5 emails=9 dup_emails=2 charges=6 violations=1 elapsed=80.3s
VIOLATION billing charged twice for one job x3: job 21: pi_a, pi_b, pi_c; job 22: pi_d, pi_e (+1 more)
note: 1 email(s) without a send record: the sending worker died in it
"""


def _line(**fields: object) -> str:
    return json.dumps(fields)


def test_the_external_log_is_counted_per_job() -> None:
    ext = sd.read_external([
        _line(source="smtp", job=1, attempt=1), _line(source="smtp", job=1, attempt=2),
        _line(source="smtp", job=1, attempt=3), _line(source="smtp", job=2, attempt=1),
        _line(source="smtp", job=None, attempt=None),
        _line(source="stripe", method="POST", path="/v1/payment_intents", status=200,
              replayed=False, job=5),
        _line(source="stripe", method="POST", path="/v1/payment_intents", status=200,
              replayed=True, job=5),  # the same key again: Stripe's memory answers
        _line(source="stripe", method="POST", path="/v1/payment_intents", status=500,
              replayed=False, job=6),  # refused: no intent
        _line(source="stripe", method="POST", path="/v1/payment_intents", status=200,
              replayed=False, job=6),
        _line(source="stripe", method="POST", path="/v1/payment_intents", status=200,
              replayed=False, job=6),  # a second intent for job 6
        _line(source="stripe", method="POST", path="/v1/payment_intents/pi_1/confirm",
              status=200, replayed=False, job=6),
        _line(source="charge", job_id=6, payment_intent="pi_1"),
        "",
    ])
    assert dict(ext.copies) == {1: 3, 2: 1}
    assert dict(ext.new_intents) == {5: 1, 6: 2}
    assert dict(ext.replayed_creates) == {5: 1}
    assert dict(ext.charges) == {6: 1}
    assert ext.unattributed == 1

    jobs = sd.Jobs(kind={1: "email", 2: "email", 5: "billing", 6: "billing"},
                   reclaims=sd.Counter({1: 2, 6: 1}))
    figures = sd.tally(jobs, ext, {})
    assert figures["email"]["duplicate_sends"] == 2
    assert figures["email"]["reclaims"] == 2
    assert figures["email"]["duplicate_sends_per_reclaim"] == "1.00"
    assert figures["billing"]["duplicate_intents"] == 1
    assert figures["billing"]["creates_replayed_by_key"] == 1
    assert figures["billing"]["duplicate_charges"] == 0


def test_a_reclaim_is_a_claim_after_a_lost_lease() -> None:
    reclaims = sd.count_reclaims([
        (1, 2, "lease_lost", False), (1, 1, None, True), (1, 3, "completed", False),
        (2, 1, "failed", False), (2, 2, "completed", False),  # a retry, not a reclaim
        (3, 1, "completion_rejected", False), (3, 2, "completed", False),
        (4, 1, "lease_lost", False),  # lost, never claimed again
    ])
    assert dict(reclaims) == {1: 2, 3: 1}


def test_an_older_soak_is_counted_from_report_txt_and_the_records() -> None:
    summary = sd.parse_summary(REPORT)
    assert (summary["emails"], summary["dup_emails"], summary["charges"]) == (9, 2, 6)
    # Job 21: two extra charges; job 22: one; the third job only counted: one at least.
    assert sd.charged_twice(REPORT) == 4
    jobs = sd.Jobs(
        kind={1: "email", 2: "email", 3: "email", 4: "email", 5: "email", 6: "email",
              7: "email", 21: "billing", 22: "billing"},
        completed={1, 2, 3, 4, 5, 6}, mailed={7},
        reclaims=sd.Counter({1: 1, 2: 1, 21: 1}),
    )
    jobs.intents[21] |= {"pi_a", "pi_b"}
    figures = sd.tally(jobs, None, summary, REPORT)
    assert figures["email"]["duplicate_sends"] == 2  # 9 copies, 7 jobs got mail
    assert figures["email"]["duplicate_sends_per_reclaim"] == "1.00"
    assert figures["billing"]["duplicate_charges"] == 4
    assert figures["billing"]["duplicate_intents"] == 1


def test_a_folder_that_is_not_a_kept_soak_is_refused(tmp_path: Path, capsys) -> None:
    assert sd.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a kept soak folder" in err
