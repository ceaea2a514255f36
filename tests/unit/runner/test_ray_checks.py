"""Issue 14 with --ray: worker 0's failed check reaches every actor through the coordinator."""

import asyncio

from kvreplay.runner.rayrun import Coordinator


def test_coordinator_keeps_the_first_failed_check_per_phase():
    async def body():
        c = Coordinator([3, 3], workers=2)
        before = await c.check(0)
        await c.set_check(0, "fresh: hits=3.0 (want 0)")
        await c.set_check(0, "drain: later")
        return before, await c.check(0), await c.check(1)

    assert asyncio.run(body()) == (None, "fresh: hits=3.0 (want 0)", None)
