"""What ``polyccm --help`` and each subcommand's ``--help`` say: the command's purpose,
whether it changes anything, and its exit status. One place, so the list of subcommands in
``polyccm --help`` and their own help cannot drift apart."""

from __future__ import annotations

MANAGER = (
    "A Kubernetes cloud-controller-manager. Without a command, runs the cloud-node, "
    "cloud-node-lifecycle, service and route controllers for one cloud provider (and the "
    "provider's own), with upstream's flags, until SIGTERM or SIGINT. It writes to the cluster "
    "and the cloud. Exit status: 0 stopped by a signal after an orderly shutdown, 1 failed while "
    "running, 2 bad input (a flag, the cloud config, the kubeconfig, the serving certificate, a "
    "port in use), as one line on stderr."
)

PLAN = (
    "Show what polyccm would do to this cluster's nodes, load balancers and routes if it ran "
    "now (adopt what an upstream CCM made, create, update, delete), without doing it. "
    "Read-only: it reads the cluster and the cloud once, and any write to the cloud is refused "
    "before it is sent. Takes the manager's flags. Exit status: 0 nothing would change (or only "
    "adoptions without writes), 1 changes planned, 2 bad input or the cluster or the cloud "
    "could not be read."
)

ORPHANS = (
    "List the cloud resources marked as this cluster's that no Service or Node of the cluster "
    "accounts for (load balancers and what they are made of, left behind by a deleted Service "
    "or cluster). Read-only unless --delete: then it deletes them, in dependency order, after "
    "a confirmation (--yes skips it). Takes the manager's flags. Exit status: 0 no orphan (or "
    "all deleted), 1 orphans found or kept (or a deletion failed), 2 bad input or the cluster "
    "or the cloud could not be read."
)

CHECK_SERVICE = (
    "Check a Service manifest for one provider, offline, with the validation and messages of "
    "its service controller: one line per problem. Touches neither the cloud nor the cluster. "
    "Exit status: 0 no problem, 1 problems found, 2 bad input (a flag, an unreadable manifest "
    "or cloud config)."
)

RBAC = (
    "Print the ClusterRole polyccm needs for one provider: the core's rules (those of "
    "deploy/kustomize/base/rbac.yaml) plus those of the provider's selected controllers. Apply "
    "it after the provider's overlay (deploy/kustomize/overlays), whose ClusterRole it "
    "replaces. Touches neither the cloud nor the cluster. Exit status: 0 printed, 2 bad input."
)

SUMMARIES = {
    "plan": "what polyccm would change now, without changing it (read-only)",
    "orphans": "cloud resources of this cluster nothing uses (read-only; --delete deletes)",
    "check-service": "check a Service manifest offline for one provider (no cloud, no cluster)",
    "rbac": "print the ClusterRole a provider's polyccm needs (no cloud, no cluster)",
}
"""Each subcommand and what it does, as ``polyccm --help`` lists them."""


def commands_epilog() -> str:
    """The list of subcommands that ends ``polyccm --help``."""
    width = max(len(name) for name in SUMMARIES)
    lines = [f"  {name:<{width}}  {summary}" for name, summary in SUMMARIES.items()]
    return (
        "commands (polyccm COMMAND --help for each; without one, polyccm runs the controllers):\n"
        + "\n".join(lines)
    )
