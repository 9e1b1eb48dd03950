"""Today's `features` and `gpus` of a Grid Proxy node: ZOS-light from the list, unknown when nobody says.

The feature lists are tfgrid-sdk-go's own (grid-proxy/pkg/types/validators.go at 10e7b39, typed here
from the source rather than imported from the product), and `[]` is what converters.go writes for a
node the features indexer has nothing for.
"""

from __future__ import annotations

import pytest

from dashboard.grid.proxy.features import light_words, parse_features, parse_gpus, zos_light
from dashboard.grid.types import MalformedPayload, NodeGpu

# grid-proxy/pkg/types/validators.go, 10e7b39, copied by hand.
ZOS3 = [
    "zmount", "zdb", "volume", "ipv4", "ip", "gateway-name-proxy", "gateway-fqdn-proxy", "qsfs", "zlogs",
    "network", "zmachine", "wireguard", "yggdrasil", "mycelium",
]  # fmt: skip
ZOS4 = [
    "zmount", "zdb", "volume", "gateway-name-proxy", "gateway-fqdn-proxy", "qsfs", "zlogs", "zmachine-light",
    "network-light", "mycelium",
]  # fmt: skip


def test_it_reads_a_full_zos_node_as_not_light():
    assert zos_light(parse_features({"features": ZOS3}, where="node 1")) is False


def test_it_reads_a_zos_light_node_as_light():
    assert zos_light(parse_features({"features": ZOS4}, where="node 1")) is True


@pytest.mark.parametrize("payload", [{}, {"features": None}, {"features": []}], ids=["older proxy", "null", "empty"])
def test_it_says_unknown_when_the_proxy_lists_no_features(payload):
    assert zos_light(parse_features(payload, where="node 1")) is None


def test_a_light_feature_beside_a_public_ip_one_is_not_light():
    # validators.go: light nodes are the ones WITHOUT ipv4/ip; one that has them takes a public IPv4.
    assert zos_light(("zmachine-light", "network-light", "ipv4")) is False


def test_features_that_say_neither_are_unknown_and_unknown_names_are_kept():
    features = parse_features({"features": ["zdb", "some-future-feature"]}, where="node 1")
    assert features == ("zdb", "some-future-feature") and zos_light(features) is None


@pytest.mark.parametrize(
    ("features", "field"),
    [
        ({"wireguard": True, "yggdrasil": True, "public_ip": False}, "features is an object"),
        ("ipv4", "features is a string"),
        (["zmount", 7], r"features\[1\] is 7"),
    ],
    ids=["the old invented object", "a string", "a number in it"],
)
def test_it_refuses_features_that_are_not_a_list_of_names_naming_the_field(features, field):
    with pytest.raises(MalformedPayload, match=f"^node 1: {field}"):
        parse_features({"features": features}, where="node 1")


def test_every_reader_has_words_for_unknown():
    assert "not known" in light_words(None) and "ZOS-light" in light_words(True) and "full" in light_words(False)


def test_it_reads_gpus_with_their_vram_and_contract():
    gpus = parse_gpus(
        {
            "gpus": [
                {"id": "0000:41:00.0/10de/2204", "vendor": "NVIDIA Corporation", "device": "GA102", "contract": 88,
                 "vram": 24576},
                {"id": "0000:42:00.0/10de/2204", "vendor": "NVIDIA Corporation", "device": "GA102", "contract": 0,
                 "updated_at": 0},
            ]
        },
        where="node 1",
    )  # fmt: skip
    assert gpus == (
        NodeGpu("0000:41:00.0/10de/2204", "NVIDIA Corporation", "GA102", 88, 24576),
        NodeGpu("0000:42:00.0/10de/2204", "NVIDIA Corporation", "GA102", 0, None),
    )


@pytest.mark.parametrize("payload", [{}, {"gpus": None}, {"gpus": []}], ids=["older proxy", "null", "none"])
def test_no_gpus_listed_is_none(payload):
    assert parse_gpus(payload, where="node 1") == ()


@pytest.mark.parametrize(
    ("gpus", "field"),
    [({"id": "x"}, "gpus is an object"), ([{"id": "x", "contract": -1}], r"gpus\[0\]\.contract"), ([3], r"gpus\[0\]")],
)
def test_it_refuses_malformed_gpus_naming_the_field(gpus, field):
    with pytest.raises(MalformedPayload, match=f"^node 1: {field}"):
        parse_gpus({"gpus": gpus}, where="node 1")
