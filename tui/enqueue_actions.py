"""`EnqueueActions`: the dashboard's enqueue keys, mixed into `TaskboardApp`.

`e`, `b` and `s` enqueue a sample email, billing or sleep job at once. `E` offers every kind
the dashboard knows — with `taskboard-tui --app MODULE:ATTR`, the app's own kinds first —
and asks for the payload: the kind's sample when one is known, else an empty object with
what the kind says is missing. Payloads are checked by the kind's own validation before
the question closes (`control.payload_problem`, no I/O), and again at enqueue.
"""

from __future__ import annotations

import json

from taskboard.core.view.control import KindOffer
from taskboard.tui.action_host import ActionHost
from taskboard.tui.screens.prompt import PromptScreen

SAMPLE_KINDS = ("email", "billing", "sleep")
"""Kinds the one-key enqueue keys offer; `BoardControl.enqueue_sample` knows how to fill them."""


class EnqueueActions(ActionHost):
    """Sample jobs at one key (e, b, s) and a job of any kind the dashboard knows (E)."""

    def action_enqueue(self, kind: str) -> None:
        """Enqueue one sample job of `kind`."""
        if kind not in SAMPLE_KINDS:
            self.notify(f"No sample job of kind {kind!r}.", severity="warning", markup=False)
            return
        self._send(
            f"enqueueing a {kind} job",
            lambda: self.control.enqueue_sample(kind),
            lambda job_id: f"Enqueued {kind} job #{job_id}",
        )

    def action_enqueue_kind(self) -> None:
        """Ask which kind (the app's first), then its payload; enqueue one job."""
        offers = {offer.name: offer for offer in self.control.enqueue_kinds()}
        if not offers:
            self.notify("This dashboard knows no job kind to enqueue.", severity="warning",
                        markup=False)
            return

        def picked(name: str | None) -> None:
            if name:
                self._ask_payload(offers[name])

        self.push_screen(
            PromptScreen(
                "Enqueue a job of which kind? " + kinds_offered(tuple(offers.values())),
                value=next(iter(offers)),
                check=lambda answer: None if answer in offers else (
                    f"no kind {answer!r} here: {', '.join(offers)}"),
            ),
            picked,
        )

    def _ask_payload(self, offer: KindOffer) -> None:
        kind = offer.name

        def problem(answer: str) -> str | None:
            payload, error = parse_payload(answer)
            return error or self.control.payload_problem(kind, payload)

        def answered(answer: str | None) -> None:
            if answer is None:
                return
            payload, _ = parse_payload(answer)
            assert isinstance(payload, dict)  # `problem` let only an object through
            self._send(
                f"enqueueing a {kind} job",
                lambda: self.control.enqueue_job(kind, payload),
                lambda job_id: f"Enqueued {kind} job #{job_id}",
            )

        hint = f" An empty one is refused: {offer.needs}." if offer.needs else ""
        self.push_screen(
            PromptScreen(
                f"Payload of the {kind} job, as a JSON object.{hint}",
                value=json.dumps(offer.sample if offer.sample is not None else {}),
                check=problem,
            ),
            answered,
        )


def kinds_offered(offers: tuple[KindOffer, ...]) -> str:
    """"The app's: square, cube. Built-in: email, noop." for the question."""
    own = [o.name for o in offers if o.app]
    builtin = [o.name for o in offers if not o.app]
    parts = []
    if own:
        parts.append(f"The app's: {', '.join(own)}.")
    if builtin:
        parts.append(f"Built-in: {', '.join(builtin)}.")
    return " ".join(parts)


def parse_payload(answer: str) -> tuple[object, str | None]:
    """(the payload, None), or (None, why it is not a JSON object) in one line."""
    try:
        payload = json.loads(answer or "{}")
    except json.JSONDecodeError as exc:
        return None, f"not JSON: {exc.msg} at column {exc.colno}"
    if not isinstance(payload, dict):
        return None, f"the payload must be a JSON object, got {type(payload).__name__}"
    return payload, None
