"""The dataflow in one place: topics, Faust tables, object keys, shared Redis keys
(``topics``, ``tables``, ``objects``, ``redis_keys``) and who reads/writes them (``graph``)."""

from .graph import GRAPH, Node, UndeclaredWrite, describe, node, worker_nodes
from .objects import OBJECT_KEYS, JobFiles, ObjectKey, upload_key
from .redis_keys import REDIS_KEYS, RedisKey
from .tables import TABLES, TableSpec
from .topics import TOPICS, TopicSpec

__all__ = ["GRAPH", "Node", "UndeclaredWrite", "describe", "node", "worker_nodes", "TOPICS",
           "TopicSpec", "TABLES", "TableSpec", "OBJECT_KEYS", "ObjectKey", "JobFiles",
           "upload_key", "REDIS_KEYS", "RedisKey"]
