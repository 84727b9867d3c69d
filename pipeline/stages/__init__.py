"""The batch stages, one module each: what a stage does with one record.

Each module holds a pure planning function (what to do given what is stored and
flagged) and a thin ``run(ports, record)`` over :class:`~pipeline.stages.ports.Ports`,
so a stage runs in a unit test on in-memory ports and in the worker on the real
stores. ``topologies.GRAPH`` names each stage's ``run`` as its node's handler.

Every stage is idempotent on redelivery: outputs go to deterministic object keys
(``topologies.objects.JobFiles``) and downstream records can be replayed. A stage
checks the cancel flag first, so a canceled job's work is dropped. Spec job errors
(``JobFailed``) end the job at once; anything else is retried by the agent and then
ends the job with ``internal_error``.
"""

from .common import fail
from .ports import Ports, Publish

__all__ = ["Ports", "Publish", "fail"]
