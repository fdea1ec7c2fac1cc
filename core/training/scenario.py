"""The training scenario: the article's lease timeline, replayed step by step on a live board.

A trainer presses "next" and the script performs the next move of the story through the
same `BoardControl` an operator uses (enqueue, pause, resume), then narrates what to watch.
Steps learn the actors from the email job's attempts history instead of assuming ids,
because the workers' timing is real: when the job has not reached the state a step needs
yet, the step says what it is waiting for and the script stays put. Between presses,
`observe` keeps the status true to every board the dashboard reads.

No Textual here: the dashboard renders `DemoScript.progress()`.
"""

from __future__ import annotations

from taskboard.core.training.kinds import StoryCue, demo_registry
from taskboard.core.training.notes import DemoNotes
from taskboard.core.training.steps import DemoStep, DemoWaiting
from taskboard.core.training.story import article_steps
from taskboard.core.training.watch import out_of_date
from taskboard.core.view.board import BoardSnapshot
from taskboard.core.view.control import BoardControl, ScenarioProgress

__all__ = [
    "DemoNotes",
    "DemoProgress",
    "DemoScript",
    "DemoStep",
    "DemoWaiting",
    "StoryCue",
    "demo_registry",
]


DemoProgress = ScenarioProgress
"""The narration panel's view of the demo (the name the dashboard's interface gives it)."""


class DemoScript:
    """Steps through the training scenario; `advance` moves on only when the board is ready.

    The script starts on an introduction (index 0) whose text explains what will happen;
    each `advance` runs the next step's action and, if it did not raise `DemoWaiting`,
    makes that step current. `CommandRefused` and other errors from the control propagate
    unchanged (the dashboard reports them) and leave the script where it was.
    """

    def __init__(
        self, steps: tuple[DemoStep, ...] | None = None, *, cue: StoryCue | None = None
    ) -> None:
        self.steps: tuple[DemoStep, ...] = steps if steps is not None else article_steps()
        if not self.steps:
            raise ValueError("a demo script needs at least one step")
        self.index = 0
        """Position of `current` in `steps`; 0 is the introduction."""
        self.cue = cue or StoryCue()
        """What lets the demo's handlers go on (the fleet's `demo_registry(cue)`)."""
        self.notes = DemoNotes(cue=self.cue)
        """Jobs and actors learned so far, used by later steps and the narration."""
        self.status = ""
        """What the next step waits for, or what the board shows it ready for; "" if nothing."""
        self.ready = False
        """True when `status` says that the next `advance` will act."""

    def restart(self) -> None:
        """Back to the introduction with nothing learned (the demo database was emptied)."""
        self.index = 0
        self.cue.reset()
        self.notes = DemoNotes(cue=self.cue)
        self.status = ""
        self.ready = False

    def observe(self, snapshot: BoardSnapshot) -> None:
        """Bring `status` up to date with the latest board (no commands, no database read).

        A board read before the script's latest fact leaves the status as it is."""
        self.notes.see(snapshot)
        if not snapshot.connected:
            self.status, self.ready = "waiting for the database to come back", False
            return
        if out_of_date(self.notes, snapshot):
            return
        awaits = None if self.finished else self.steps[self.index + 1].awaits
        seen = awaits(self.notes, snapshot) if awaits is not None else None
        self.status, self.ready = (seen.status, seen.ready) if seen else ("", False)

    @property
    def current(self) -> DemoStep:
        """The step whose narration is on screen."""
        return self.steps[self.index]

    @property
    def finished(self) -> bool:
        """True once the last step is current."""
        return self.index == len(self.steps) - 1

    @property
    def narration(self) -> str:
        """The current step's narration, told from what the script has learned."""
        return self.current.narrate(self.notes)

    def progress(self) -> ScenarioProgress:
        """A plain-value view of the current state for rendering."""
        return ScenarioProgress(
            index=self.index,
            total=len(self.steps) - 1,
            title=self.current.title,
            narration=self.narration,
            status=self.status,
            finished=self.finished,
            ready=self.ready,
        )

    async def advance(self, control: BoardControl, snapshot: BoardSnapshot | None) -> DemoStep:
        """Perform the next step against the board; return the step now current."""
        if self.finished:
            self.status, self.ready = "the scenario is over", False
            return self.current
        step = self.steps[self.index + 1]
        if step.action is not None:
            try:
                await step.action(control, snapshot, self.notes)
            except DemoWaiting as waiting:
                self.status, self.ready = str(waiting), False
                return self.current
        self.index += 1
        # Nothing said about the next step until a board read after this one's commands.
        self.status, self.ready = "", False
        return step
