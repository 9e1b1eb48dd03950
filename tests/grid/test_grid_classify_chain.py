"""The chain's refusals classified (grid.classify): TFChain's module errors as the clients pass them on.

The names are tfchain pallet-smart-contract's Error enum; the Go client (tfchain-client-go checkForError)
returns the bare name, the Go deployer wraps it ("failed to create contract on node N: failed to create
contract: <Name>"), polkadot.js says "smartContractModule.<Name>"."""

import pytest

from dashboard.grid.classify import CAUSES, classify

GO = "failed to create contract on node 1774: failed to create contract: {}"


@pytest.mark.parametrize(
    ("raw", "cause", "name"),
    [
        (GO.format("NodeNotAvailableToDeploy"), "node-closed", "NodeNotAvailableToDeploy"),
        (
            "failed to create contracts: " + GO.format("NodeNotAvailableToDeploy"),
            "node-closed",
            "NodeNotAvailableToDeploy",
        ),
        ("smartContractModule.NodeNotAvailableToDeploy", "node-closed", "NodeNotAvailableToDeploy"),
        (
            "failed to update contract: TwinNotAuthorizedToUpdateContract",
            "not-authorized",
            "TwinNotAuthorizedToUpdateContract",
        ),
        (
            "failed to cancel contract: TwinNotAuthorizedToCancelContract",
            "not-authorized",
            "TwinNotAuthorizedToCancelContract",
        ),
        ("smartContractModule.TwinNotAuthorized", "not-authorized", "TwinNotAuthorized"),
        (
            "failed to update contract: CannotUpdateContractInGraceState",
            "contract-grace",
            "CannotUpdateContractInGraceState",
        ),
        ("ContractNotInCreatedState", "contract-grace", "ContractNotInCreatedState"),
        (GO.format("NotEnoughResourcesOnNode"), "chain-capacity", "NotEnoughResourcesOnNode"),
    ],
)
def test_it_classifies_the_chains_words(raw, cause, name):
    diagnosis = classify(raw)
    assert (diagnosis.cause, diagnosis.chain_error, diagnosis.reason) == (cause, name, name)


@pytest.mark.parametrize("cause", ["node-closed", "not-authorized", "contract-grace", "chain-capacity"])
def test_every_chain_cause_is_a_stored_cause(cause):
    from dashboard.models import Deployment

    assert cause in CAUSES and cause in Deployment.Cause.values


def test_it_names_the_node_the_go_deployer_named():
    assert "node 1774 is not available to the marketplace" in classify(GO.format("NodeNotAvailableToDeploy")).words


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (GO.format("NodeNotAvailableToDeploy"), "another twin rents it"),
        ("TwinNotAuthorizedToUpdateContract", "does not own that contract"),
        ("CannotUpdateContractInGraceState", "grace period"),
        ("NotEnoughResourcesOnNode", "does not have the capacity"),
    ],
)
def test_each_cause_has_plain_words_for_support(raw, says):
    diagnosis = classify(raw)
    assert says in diagnosis.words and "TFChain refused the contract with" in diagnosis.detail


def test_a_name_inside_another_word_is_not_the_chains():
    assert classify("xNodeNotAvailableToDeployment").cause == "unknown"


def test_a_chain_refusal_wins_over_words_that_follow_it():
    raw = GO.format("NodeNotAvailableToDeploy") + " (node is down?)"
    assert classify(raw).cause == "node-closed"
