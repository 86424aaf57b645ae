"""The ``tagging`` controller: puts ``--tags`` on the EC2 instance of every node, as upstream's
tagging controller (cloud-provider-aws pkg/controllers/tagging) does.

A node is tagged (CreateTags) once for each set of tags: it is then labelled
``k8s.io/cloud-provider-aws`` with the MD5 checksum of the sorted ``key=value`` pairs, and a
node carrying the checksum of the current tags is not tagged again; changing ``--tags`` changes
the checksum, so every node is tagged once more. When a node is deleted, the current tags are
taken off its instance (DeleteTags names each key with its value, so a tag someone changed
since stays). Fargate nodes run on no instance and are skipped. With
``--tagging-controller-enable-batching``, up to 50 queued nodes share one CreateTags (or
DeleteTags) call, each tried alone when the shared call fails, as upstream's batcher does. A
node whose instance EC2 does not know yet (CreateTags is eventually consistent) is retried
while the node is younger than five minutes; a work item is given up after nine retries, as
upstream gives up.
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
BATCH = 50
"""With ``--tagging-controller-enable-batching``, the most instances one call tags (upstream's
batcher takes 50)."""
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
        if self.options.batching:
            keys = queue.get_batch(BATCH, timeout=1.0)
        else:
            key = queue.get(timeout=1.0)
            keys = [] if key is None else [key]
        if not keys:
            return not queue.shutting_down
        try:
            outcomes = self._sync_all(keys)
        except BaseException:
            for key in keys:
                queue.done(key)
            raise
        for key in keys:
            error = outcomes.get(key)
            if error is None:
                queue.forget(key)
            elif queue.num_requeues(key) < MAX_REQUEUES:
                log.warning("%s: %s: %s (retry %d)", self.name, key, error,
                            queue.num_requeues(key) + 1)  # fmt: skip
                queue.add_rate_limited(key)
            else:
                log.error("%s: %s: %s; retries exhausted, given up", self.name, key, error)
                queue.forget(key)
            queue.done(key)
        return True

    def _sync_all(self, keys: list[str]) -> dict[str, Exception | None]:
        """Tag and untag what ``keys`` ask; each key's failure, or None. With batching, the
        instances of the batch that need the same call share it (upstream's batcher); when
        that call fails, each is tried alone, as upstream then does."""
        outcomes: dict[str, Exception | None] = dict.fromkeys(keys)
        calls: dict[str, dict[str, str]] = {ADD: {}, DELETE: {}}  # action -> key -> instance
        for key in keys:
            action, name, provider_id = key.split("/", 2)
            instance_id = self._instance_of(name, provider_id)
            if instance_id is None or INSTANCE not in self.options.resources:
                continue
            if action == DELETE or self._needs_tagging_now(name):
                calls[action][key] = instance_id
        for action, wanted in calls.items():
            operation = self._tag if action == ADD else self._untag
            if len(wanted) > 1:
                try:
                    operation(list(wanted.values()))
                except LeadershipLost:
                    raise
                except Exception as error:  # noqa: BLE001 - each tried alone below
                    log.info("%s: batched %s of %d instances failed (%s); one by one",
                             self.name, action, len(wanted), error)  # fmt: skip
                else:
                    for key in wanted:
                        outcomes[key] = self._settled(action, key, None)
                    continue
            for key, instance_id in wanted.items():
                try:
                    operation([instance_id])
                except LeadershipLost:
                    raise
                except Exception as error:  # noqa: BLE001 - judged per key
                    outcomes[key] = self._settled(action, key, error)
                else:
                    outcomes[key] = self._settled(action, key, None)
        return outcomes

    def _instance_of(self, name: str, provider_id: str) -> str | None:
        if fargate_node_id(provider_id) is not None:
            log.info("%s: node %s is a Fargate node: nothing to tag", self.name, name)
            return None
        try:
            return instance_id_from_provider_id(provider_id)
        except InvalidProviderID as error:
            log.warning("%s: node %s: %s; not tagged", self.name, name, error)
            return None

    def _needs_tagging_now(self, name: str) -> bool:
        """The node still exists and does not carry the current checksum."""
        raw = self.context.nodes.get(name)
        return raw is not None and self._needs_tagging(Node(raw))

    def _settled(self, action: str, key: str, error: Exception | None) -> Exception | None:
        """What the call's outcome means for ``key``: the label after a tagging, a failure
        kept for a retry, or nothing more to do (as upstream judges the AWS error)."""
        _, name, provider_id = key.split("/", 2)
        code = error_code(error) if error is not None else ""
        if action == DELETE:
            if error is None or code == "InvalidID" or code.startswith("InvalidInstanceID"):
                log.info("%s: untagged the instance of deleted node %s", self.name, name)
                return None  # gone with its tags, or untagged
            return error
        if error is not None:
            raw = self.context.nodes.get(name)
            if code == _NOT_FOUND and not (raw is not None and _within_grace(raw)):
                log.info("%s: the instance of node %s does not exist; not tagged", self.name,
                         name)  # fmt: skip
                return None
            if code == "InvalidID" or code.startswith("InvalidInstanceID.Malformed"):
                log.info("%s: node %s names no valid instance (%s); not tagged", self.name,
                         name, provider_id)  # fmt: skip
                return None
            return error
        try:
            self.context.api.patch(
                NODES, name, {"metadata": {"labels": {CHECKSUM_LABEL: self.checksum}}},
                patch_type=MERGE_PATCH,
            )  # fmt: skip
        except ApiError as failure:
            return None if failure.not_found else failure
        except LeadershipLost:
            raise
        except Exception as failure:  # noqa: BLE001 - retried
            return failure
        log.info("%s: tagged the instance of node %s", self.name, name)
        return None

    def _tag(self, instance_ids: list[str]) -> None:
        self.api.call("ec2", "create_tags", Resources=instance_ids, Tags=self._tag_list())

    def _untag(self, instance_ids: list[str]) -> None:
        self.api.call("ec2", "delete_tags", Resources=instance_ids, Tags=self._tag_list())

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
