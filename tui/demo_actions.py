"""`DemoActions`: the training scenario's keys (`n`, `R`) and its narration panel, mixed
into `TaskboardApp`.

Only in demo mode (`taskboard-tui --demo`, `TaskboardApp(demo=...)`); what the keys are
and when they are greyed out lives in `tui/actions.py`. One step or restart runs at a
time: while one runs the narration says so and both keys are greyed out.
"""

from __future__ import annotations

from taskboard.tui.action_host import ActionHost


class DemoActions(ActionHost):
    """Next step, restart and the narration of the training scenario."""

    def action_next_step(self) -> None:
        """Advance the training scenario by one step."""
        if self.demo is not None and not self._demo_busy:
            self._set_demo_busy(True)
            self.run_worker(self.advance_demo(), group="demo", exit_on_error=False)

    async def advance_demo(self) -> None:
        """Run the next demo step against the latest snapshot, then refresh the board."""
        if self.demo is None:
            return
        try:
            await self.demo.advance(self.control, self.snapshot)
        except Exception as err:
            self.notify_failure(err, "Demo step failed")
        finally:
            self._set_demo_busy(False)
            self.request_refresh()

    def action_restart_demo(self) -> None:
        """Start the training scenario again, after asking."""
        if self.demo is None or self._demo_busy:
            return
        self._confirm(
            "Start the training scenario again? The demo database is emptied (jobs, "
            "attempts, failures) with the emails and charges seen, and two fresh workers "
            "start.",
            "Restart the demo",
            self._restart_demo,
        )

    def _restart_demo(self) -> None:
        self._set_demo_busy(True)
        self.run_worker(self.restart_demo(), group="demo", exit_on_error=False)

    async def restart_demo(self) -> None:
        """Reset the demo's database and workers, then the scenario and the failures log."""
        if self.demo is None:
            return
        ticket = next(self._pending_ids)
        self._pending[ticket] = ("restarting the demo", self._clock())
        try:
            await self.control.reset_demo()
        except Exception as err:
            self.notify_failure(err, "Demo restart failed")
        else:
            self.demo.restart()
            self._failures_log.clear_log()
            self.notify("The training scenario starts again", markup=False)
        finally:
            del self._pending[ticket]
            self._set_demo_busy(False)
            self.request_refresh()

    def _set_demo_busy(self, busy: bool) -> None:
        self._demo_busy = busy
        self._render_narration()
        self._update_bindings()

    def _render_narration(self) -> None:
        if self._narration is not None and self.demo is not None:
            self._narration.show(self.demo.progress(), self._colours, busy=self._demo_busy)
