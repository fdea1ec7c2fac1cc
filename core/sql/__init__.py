"""Every SQL statement Taskboard runs, named after the transition it performs.

One package, one module per subject: `claim` and `lease` (the protocol), `attempts` (the
history they write), `workers` (a worker's row and sessions), `jobs` (enqueue, operator
commands), `bulk` (retry and cancel by filter), `board` (status and dashboard reads),
`job_lists` (jobs in one state), `admin` (schema, installation, stand-ins), `effects` (the
records of charges and sends), `health` (vacuum and the xmin horizon), `steps` (durable
steps and results), `dependencies` (jobs that wait for others), `limits` (fleet-wide limits
per kind), `wake_up` (how long an idle worker sleeps). The schema itself is in
`core/engine/migrations/*.sql`. All user data travels as bind parameters; nothing here is
ever formatted with user input.
"""

from taskboard.core.sql.admin import *  # noqa: F403
from taskboard.core.sql.attempts import *  # noqa: F403
from taskboard.core.sql.board import *  # noqa: F403
from taskboard.core.sql.bulk import *  # noqa: F403
from taskboard.core.sql.claim import *  # noqa: F403
from taskboard.core.sql.dependencies import *  # noqa: F403
from taskboard.core.sql.effects import *  # noqa: F403
from taskboard.core.sql.health import *  # noqa: F403
from taskboard.core.sql.job_lists import *  # noqa: F403
from taskboard.core.sql.jobs import *  # noqa: F403
from taskboard.core.sql.lease import *  # noqa: F403
from taskboard.core.sql.limits import *  # noqa: F403
from taskboard.core.sql.steps import *  # noqa: F403
from taskboard.core.sql.wake_up import *  # noqa: F403
from taskboard.core.sql.workers import *  # noqa: F403
