"""The Grid Proxy's word on a farm's public IPv4s, parsed as strictly as the rest of grid.proxy (whether a
node takes one, ZOS-light or not, is grid.proxy.features).

Shape (grid/schemas/gridproxy.json FarmList, from tfgrid-sdk-go pkg/types/farms.go and publicips.go): GET
/farms?farm_id=F answers a list of farms, each with `publicIps: [{id, ip, gateway, contract_id}]`
(contract_id 0: free). An older shape spelt it `contractId`; both are read.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from typing import Any

from dashboard.grid.proxy.answers import describe
from dashboard.grid.types import FarmPublicIps, MalformedPayload, PublicIp

MAX_FARM_IPS = 65536  # more than a /16 on one farm is a broken record


def farm_ips_read(get_json: Callable[..., tuple[Any, str]], farm_id: int, *, parsed: Callable) -> FarmPublicIps:
    """One request under the client's deadlines and budget; a malformed answer fails as the client's do."""
    payload, url = get_json("/farms", params={"farm_id": farm_id}, node_id=None)
    return parsed(lambda p: parse_farm_ips(p, farm_id=farm_id), payload, url)


def parse_farm_ips(payload: Any, *, farm_id: int) -> FarmPublicIps:
    """The farm's entry of GET /farms?farm_id=F: its public IPv4s. A list without it is malformed (the
    farm exists: its nodes name it)."""
    where = f"farm {farm_id}"
    if not isinstance(payload, list):
        raise MalformedPayload(f"{where}: GET /farms answered {describe(payload)}, must be a list")
    farm = next((f for f in payload if isinstance(f, dict) and f.get("farmId") == farm_id), None)
    if farm is None:
        raise MalformedPayload(f"{where}: GET /farms?farm_id={farm_id} does not list the farm")
    name = farm.get("name") or ""
    if not isinstance(name, str):
        raise MalformedPayload(f"{where}: name is {describe(name)}, must be text")
    ips = farm.get("publicIps")
    if ips is None:
        ips = []
    if not isinstance(ips, list) or len(ips) > MAX_FARM_IPS:
        raise MalformedPayload(f"{where}: publicIps is {describe(ips)}, must be a list of at most {MAX_FARM_IPS}")
    return FarmPublicIps(
        farm_id=farm_id,
        farm_name=name[:128],
        ips=tuple(_public_ip(ip, where=f"{where} publicIps[{i}]") for i, ip in enumerate(ips)),
    )


def _public_ip(entry: Any, *, where: str) -> PublicIp:
    if not isinstance(entry, dict):
        raise MalformedPayload(f"{where} is {describe(entry)}, must be an object")
    ip, gateway = entry.get("ip"), entry.get("gateway") or ""
    try:
        ipaddress.ip_interface(ip)
    except (TypeError, ValueError):
        raise MalformedPayload(f"{where}: ip is {describe(ip)}, must be an address such as 185.69.166.5/24") from None
    if not isinstance(gateway, str) or len(gateway) > 64:
        raise MalformedPayload(f"{where}: gateway is {describe(gateway)}, must be an address")
    contract = entry.get("contract_id", entry.get("contractId", 0))
    if contract is None:
        contract = 0
    if isinstance(contract, bool) or not isinstance(contract, int) or not 0 <= contract <= 2**64 - 1:
        raise MalformedPayload(f"{where}: contract_id is {describe(contract)}, must be a contract id or 0 (free)")
    return PublicIp(ip=ip, gateway=gateway, contract_id=contract)


__all__ = ["FarmPublicIps", "farm_ips_read", "parse_farm_ips"]
