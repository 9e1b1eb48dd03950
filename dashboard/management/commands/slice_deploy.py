"""manage.py slice_deploy NODE_ID (--slice INDEX | --all-free) [--no-precheck] [--json]"""

import json

from django.core.management.base import CommandError

from dashboard.deployments.selectors.deployments import deployment_words
from dashboard.deployments.services.deploy import slice_deploy, slices_deploy_all_free
from dashboard.deployments.services.deploy_errors import DeployError
from dashboard.grid.types import GridError
from dashboard.management.cli import EXIT_REFUSED, EXIT_USAGE, ProductCommand, grid_id, registered_node
from dashboard.models import Deployment, Node

SOME_NOT_DEPLOYED = EXIT_REFUSED


class Command(ProductCommand):
    help = (
        "Deploy a node's free slice (or all of them, in index order) on the grid, recording every attempt. "
        "The precheck reads live capacity first and refuses a slice that cannot fit; --no-precheck sends it "
        "to the grid anyway (ZOS then says why it fails)."
    )
    exit_statuses = {
        0: "every slice deployed",
        EXIT_REFUSED: "some slice was refused or failed (each recorded, see the output), or none could be "
        "attempted (slice not free, grid unreachable)",
        EXIT_USAGE: "the command line is wrong (unknown node, bad arguments); nothing was attempted",
    }

    stores_figures = True

    def add_arguments(self, parser):
        parser.add_argument("node_id", type=grid_id, help="the grid's node id")
        which = parser.add_mutually_exclusive_group(required=True)
        which.add_argument("--slice", type=int, dest="slice_index", metavar="INDEX", help="the slice's index")
        which.add_argument("--all-free", action="store_true", help="every free slice, in index order")
        parser.add_argument("--no-precheck", action="store_true", help="skip the live-capacity check")
        parser.add_argument("--json", action="store_true", dest="as_json", help="print the outcome as JSON")

    def handle(self, *args, node_id, slice_index, all_free, no_precheck, as_json, **options):
        node = registered_node(node_id)
        done: list[Deployment] = []

        def record(deployment: Deployment) -> None:
            # Printed as each slice ends, so a long --all-free run shows progress and survives an interruption.
            done.append(deployment)
            if not as_json:
                self._print_one(deployment)

        try:
            if all_free:
                slices_deploy_all_free(node=node, precheck=not no_precheck, source="command", on_each=record)
            else:
                record(slice_deploy(node=node, slice_index=slice_index, precheck=not no_precheck, source="command"))
        except (DeployError, GridError) as exc:
            if as_json and done:
                self.stdout.write(json.dumps(_outcome(done) | {"error": str(exc)}, indent=2))
            raise CommandError(_error_words(exc, done), returncode=EXIT_REFUSED) from None
        self._finish(node, done, as_json)

    def _print_one(self, deployment: Deployment) -> None:
        style = self.style.SUCCESS if deployment.state == Deployment.State.DEPLOYED else self.style.ERROR
        self.stdout.write(style(deployment_words(deployment)))

    def _finish(self, node: Node, done: list[Deployment], as_json: bool) -> None:
        outcome = _outcome(done)
        if as_json:
            self.stdout.write(json.dumps(outcome, indent=2))
        elif not done:
            self.stdout.write(f"node {node.grid_id} has no free slice; nothing to deploy")
        if outcome["failed"]:
            raise CommandError(
                f"{len(outcome['failed'])} of {outcome['attempted']} slices on node {node.grid_id} were not deployed",
                returncode=SOME_NOT_DEPLOYED,
            )
        if not as_json and done:
            self.stdout.write(f"{outcome['deployed']} of {outcome['attempted']} slices deployed on node {node.grid_id}")


def _outcome(done: list[Deployment]) -> dict:
    failed = [d for d in done if d.state != Deployment.State.DEPLOYED]
    return {
        "attempted": len(done),
        "deployed": len(done) - len(failed),
        "failed": [
            {
                "slice": d.slice_index,
                "deployment": d.pk,
                "state": d.state,
                "cause": d.cause,
                "message": deployment_words(d),
                "error": d.raw_error,
                "needed_bytes": d.needed_bytes,
                "usable_bytes": d.usable_bytes,
            }
            for d in failed
        ],
    }


def _error_words(exc: Exception, done: list[Deployment]) -> str:
    if not isinstance(exc, GridError):
        return str(exc)
    if done:
        return f"grid: {exc} (stopped after {len(done)} slices; those are recorded)"
    return f"grid: {exc} (nothing was recorded)"
