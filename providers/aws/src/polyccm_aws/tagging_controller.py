"""The ``tagging`` controller: puts ``--tags`` on the EC2 instance of every node, as upstream's
tagging controller (cloud-provider-aws pkg/controllers/tagging) does.

A node is tagged (CreateTags) once for each set of tags: it is then labelled
``k8s.io/cloud-provider-aws`` with the MD5 checksum of the sorted ``key=value`` pairs, and a
node carrying the checksum of the current tags is not tagged again; changing ``--tags`` changes
the checksum, so every node is tagged once more. When a node is deleted, the current tags are
taken off its instance (DeleteTags names each key with its value, so a tag someone changed
since stays). Fargate nodes run on no instance and are skipped. A node whose instance EC2 does
not know yet (CreateTags is eventually consistent) is retried while the node is younger than
five minutes; a work item is given up after nine retries, as upstream gives up.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from polyccm.controllers import (
    MERGE_PATCH,
    NODES,
    ApiError,
    Controller,
    ControllerContext,
    LeadershipLost,
    Node,
    RateLimitingQueue,
    run_workers,
)

from polyccm_aws.api import AwsApi, error_code
from polyccm_aws.provider_id import (
    InvalidProviderID,
    fargate_node_id,
    instance_id_from_provider_id,
)
from polyccm_aws.tagging_options import CONTROLLER, INSTANCE, TaggingOptions

log = logging.getLogger(__name__)

CHECKSUM_LABEL = "k8s.io/cloud-provider-aws"
"""The label upstream's tagging controller marks a tagged node with."""
MAX_REQUEUES = 9
"""Retries of a failing work item before it is given up (upstream's maxRequeuingCount)."""
NEW_NODE_GRACE = 300.0
"""Seconds after a node's creation during which an instance EC2 does not know is retried."""
ADD, DELETE = "ADD", "DELETE"
_NOT_FOUND = "InvalidInstanceID.NotFound"


def tags_checksum(tags: Mapping[str, str]) -> str:
    """The value of :data:`CHECKSUM_LABEL` for ``tags``: MD5 of the sorted ``key=value`` pairs
    joined by commas, in hex (upstream's ``getChecksumOfTags``)."""
    joined = ",".join(sorted(f"{key}={value}" for key, value in tags.items()))
    return hashlib.md5(joined.encode(), usedforsecurity=False).hexdigest()


class _Bucket:
    """A token bucket: how long an item waits before it may enter the queue, when
    ``--tagging-controller-rate-limit`` and ``--tagging-controller-burst-limit`` are both set."""

    def __init__(self, rate: float, burst: int) -> None:
        self._rate = rate
        self._burst = float(burst)
        self._tokens = float(burst)
        self._at = time.monotonic()
        self._lock = threading.Lock()

    def delay(self) -> float:
        with self._lock:
            now = time.monotonic()
            self._tokens = min(self._burst, self._tokens + (now - self._at) * self._rate)
            self._at = now
            self._tokens -= 1.0
            return 0.0 if self._tokens >= 0 else -self._tokens / self._rate


class TaggingController(Controller):
    """Tags the nodes' EC2 instances with ``--tags`` and labels the nodes with the checksum."""

    name = CONTROLLER

    def __init__(self, context: ControllerContext, api: AwsApi, options: TaggingOptions) -> None:
        self.context = context
        self.api = api
        self.options = options
        self.checksum = tags_checksum(options.tags)
        self.queue = RateLimitingQueue(self.name)
        limited = options.rate_limit > 0 and options.burst_limit > 0
        self._bucket = _Bucket(options.rate_limit, options.burst_limit) if limited else None

    @classmethod
    def for_term(cls, context: ControllerContext) -> TaggingController | None:
        """The controller for this term, when the provider is AWS's and ``tagging`` was given
        its options (the plugin checks them at start-up)."""
        options = getattr(context.provider, "tagging_options", None)
        api = getattr(context.provider, "api", None)
        if not isinstance(options, TaggingOptions) or not isinstance(api, AwsApi):
            log.warning("%s: the provider is not AWS's or has no tagging options", CONTROLLER)
            return None
        return cls(context, api, options)

    # -- events ---------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        log.info("%s: tagging %s with %s", self.name, ", ".join(self.options.resources),
                 dict(self.options.tags))  # fmt: skip
        self.context.nodes.add_handler(
            on_add=lambda raw: self._enqueue(Node(raw), ADD),
            on_update=self._on_update,
            on_delete=lambda raw: self._enqueue(Node(raw), DELETE),
        )
        run_workers(
            name=self.name, queue=self.queue, workers=self.options.workers, stop=stop,
            process=self._process,
        )  # fmt: skip

    def _on_update(self, old: Mapping[str, Any], raw: Mapping[str, Any]) -> None:
        node = Node(raw)
        if self._needs_tagging(node):
            self._enqueue(node, ADD)

    def _needs_tagging(self, node: Node) -> bool:
        return node.labels.get(CHECKSUM_LABEL) != self.checksum

    def _enqueue(self, node: Node, action: str) -> None:
        # Node names hold no "/", actions neither: the provider ID is all after the second.
        key = f"{action}/{node.name}/{node.provider_id}"
        if self._bucket is None:
            self.queue.add(key)
        else:
            self.queue.add_after(key, self._bucket.delay())

    # -- work -----------------------------------------------------------------------------

    def _process(self, queue: RateLimitingQueue) -> bool:
        key = queue.get(timeout=1.0)
        if key is None:
            return not queue.shutting_down
        try:
            action, name, provider_id = key.split("/", 2)
            self._sync(action, name, provider_id)
        except LeadershipLost:
            raise
        except Exception as error:  # noqa: BLE001 - retried, then given up as upstream
            retries = queue.num_requeues(key)
            if retries < MAX_REQUEUES:
                log.warning("%s: %s: %s (retry %d)", self.name, key, error, retries + 1)
                queue.add_rate_limited(key)
            else:
                log.error("%s: %s: %s; retries exhausted, given up", self.name, key, error)
                queue.forget(key)
        else:
            queue.forget(key)
        finally:
            queue.done(key)
        return True

    def _sync(self, action: str, name: str, provider_id: str) -> None:
        if fargate_node_id(provider_id) is not None:
            log.info("%s: node %s is a Fargate node: nothing to tag", self.name, name)
            return
        try:
            instance_id = instance_id_from_provider_id(provider_id)
        except InvalidProviderID as error:
            log.warning("%s: node %s: %s; not tagged", self.name, name, error)
            return
        for resource in self.options.resources:
            if resource != INSTANCE:
                continue
            if action == ADD:
                self._tag(name, instance_id)
            else:
                self._untag(name, instance_id)

    def _tag(self, name: str, instance_id: str) -> None:
        raw = self.context.nodes.get(name)
        if raw is None:
            return  # deleted since: nothing to tag
        node = Node(raw)
        if not self._needs_tagging(node):
            return
        try:
            self.api.call("ec2", "create_tags", Resources=[instance_id], Tags=self._tag_list())
        except Exception as error:
            code = error_code(error)
            if code == _NOT_FOUND and not _within_grace(raw):
                log.info("%s: instance %s of node %s does not exist; not tagged", self.name,
                         instance_id, name)  # fmt: skip
                return
            if code == "InvalidID" or code.startswith("InvalidInstanceID.Malformed"):
                log.info("%s: node %s names no valid instance (%s); not tagged", self.name,
                         name, instance_id)  # fmt: skip
                return
            raise
        try:
            self.context.api.patch(
                NODES, name, {"metadata": {"labels": {CHECKSUM_LABEL: self.checksum}}},
                patch_type=MERGE_PATCH,
            )  # fmt: skip
        except ApiError as error:
            if error.not_found:
                return
            raise
        log.info("%s: tagged %s of node %s", self.name, instance_id, name)

    def _untag(self, name: str, instance_id: str) -> None:
        try:
            self.api.call("ec2", "delete_tags", Resources=[instance_id], Tags=self._tag_list())
        except Exception as error:
            code = error_code(error)
            if code == "InvalidID" or code.startswith("InvalidInstanceID"):
                return  # the instance is gone: so are its tags
            raise
        log.info("%s: untagged %s of deleted node %s", self.name, instance_id, name)

    def _tag_list(self) -> list[dict[str, str]]:
        return [{"Key": key, "Value": value} for key, value in self.options.tags.items()]


def _within_grace(raw: Mapping[str, Any]) -> bool:
    created = (raw.get("metadata") or {}).get("creationTimestamp")
    if not isinstance(created, str):
        return False
    try:
        when = datetime.fromisoformat(created.replace("Z", "+00:00"))
    except ValueError:
        return False
    return (datetime.now(UTC) - when).total_seconds() < NEW_NODE_GRACE
