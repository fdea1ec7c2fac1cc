"""The queues panel: queues an operator paused (and what waits in them), the kinds' fleet
limits (and what waits on them), and schedules with their next run on the database clock."""

from __future__ import annotations

from rich.text import Text
from taskboard.core.view.board import BoardSnapshot
from taskboard.tui.format import Colours, age, clock, short
from textual.widgets import Static

SHOWN = 6
"""Paused queues and schedules listed each; the rest are counted."""


class QueuesPanel(Static):
    """Paused queues first (they stop work for every worker), then schedules by next run."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.border_title = "Queues · schedules"
        self.border_subtitle = "P pauses or resumes a queue"
        self._shown: tuple[object, ...] | None = None

    def show(self, snapshot: BoardSnapshot, colours: Colours) -> None:
        """Render paused queues and schedules; skip the repaint when nothing changed."""
        now = snapshot.db_now
        key = (snapshot.paused_queues, snapshot.limits, snapshot.schedules,
               now.replace(microsecond=0), colours)
        if key == self._shown:
            return
        self._shown = key
        text = Text()
        paused = snapshot.paused_queues
        if not paused:
            text.append("No queue is paused.", colours.muted)
        for queue in paused[:SHOWN]:
            if text:
                text.append("\n")
            since = (now - queue.paused_at).total_seconds()
            text.append("PAUSED ", f"bold {colours.warn}")
            text.append(short(queue.name, 16), "bold")
            text.append(f" {queue.waiting} waiting · {age(since)} ago", colours.muted)
            if queue.reason:
                text.append(f"\n  {short(queue.reason, 60)}", colours.muted)
        if len(paused) > SHOWN:
            text.append(f"\nand {len(paused) - SHOWN} more paused", colours.muted)
        # Fleet-wide limits hold work back too: say what waits on each.
        for limit in snapshot.limits[:SHOWN]:
            text.append("\nLIMIT ", f"bold {colours.warn}" if limit.waiting else colours.muted)
            text.append(short(limit.summary, 70))
        if len(snapshot.limits) > SHOWN:
            text.append(f"\nand {len(snapshot.limits) - SHOWN} more limits", colours.muted)
        # Disabled schedules first: they need an operator (`schedule add` enables again).
        schedules = sorted(
            snapshot.schedules,
            key=lambda s: (s.next_run is not None, s.next_run or now, s.name),
        )
        if not schedules:
            text.append("\nNo schedules.", colours.muted)
        for schedule in schedules[:SHOWN]:
            text.append("\n")
            if schedule.next_run is None:
                text.append("DISABLED ", f"bold {colours.warn}")
            text.append(short(schedule.name, 16), "bold")
            text.append(f" {schedule.kind}→{schedule.queue}", colours.muted)
            if schedule.next_run is None:
                text.append(f"\n  {short(schedule.error or 'disabled', 60)}", colours.muted)
            else:
                until = (schedule.next_run - now).total_seconds()
                at = clock(schedule.next_run.astimezone(now.tzinfo))  # the header's zone
                text.append(f"\n  next {at} (in {age(until)})")
            text.append(f"  {short(schedule.cron, 30)}", colours.muted)
        if len(schedules) > SHOWN:
            text.append(f"\nand {len(schedules) - SHOWN} more schedules", colours.muted)
        self.update(text)
