"""Tasks: data and model per task, as tff.simulation.baselines.BaselineTask.

`get_task(name, train_client_spec=..., ...)` builds one of `TASK_NAMES`; see its
docstring (`tasks.registry`) for the names, their data and options. A data set
that is neither cached nor downloadable raises `DatasetUnavailableError`, naming
the file expected and where to put it.
"""

from tff_priv_tasks.cache import DatasetUnavailableError
from tff_priv_tasks.public_split import hold_out_public_clients
from tff_priv_tasks.registry import get_task
from tff_priv_tasks.registry import OFFLINE_TASK_NAMES
from tff_priv_tasks.registry import TASK_NAMES
from tff_priv_tasks.registry import task_options
