"""The dataflow in one place: topic declarations (``topics``) and who reads/writes them (``graph``)."""

from .graph import GRAPH, Node, describe, node
from .topics import TOPICS, TopicSpec

__all__ = ["GRAPH", "Node", "describe", "node", "TOPICS", "TopicSpec"]
