"""Read a raw grid failure and say what went wrong, in ZOS's terms and in plain words.

ZOS's reasons arrive wrapped (the Go deployer: `workload <name> within deployment <id>
failed with error: <reason>`, and more layers above it) or not at all (the Rust client
says only `vm deployment entered error state`). classify() unwraps what it can, picks
the cause, pulls out the numbers and writes one sentence for support staff. It never
raises: empty, garbage or non-text input is an `unknown` diagnosis.

The strings recognised are ZOS's own (see docs/domain.md), typos included:
- memory:  failed to satisfy required capacity: cannot fulfil required memory size <N> bytes out of usable <M> bytes
- disk:    not enough space left in pools of this type ssd
           failed to create vm rootfs: ...  /  failed to find a candidate to host vdisk of size '<N>': ...
- validation: mem capacity can't be less that 250M
           disk size can't be less that <N>. Set to 0 for minimum
           cpu capacity can't be 0 (cpu capcity before zosbase fixed the typo)
           invalid cpu must be between 1 and <N> (more vCPUs than the node's threads; vmd's VM.Validate)
- the zos-cache: subvolume 'zos-cache' not found (cache-missing: the node refuses everything),
           failed to mount flist ... disk quota exceeded (cache-full: transient)
- and the rest of ZOS's families on its capacity, storage, VM-validation and flist paths, each with its
  source: grid/zos_words.py.

Before ZOS sees a VM, TFChain decides whether its contract may be created (tfchain
pallet-smart-contract, grid_contract.rs); the Go client (tfchain-client-go, checkForError) returns the
module error's bare name, which the Go deployer wraps as `failed to create contract on node <N>:
failed to create contract: <Name>`; polkadot.js names it `smartContractModule.<Name>`:
- node-closed:  NodeNotAvailableToDeploy (the node is on standby or switched to it, rented by another
                twin, or dedicated (farm flag or extra fee) with no rent contract of the deploying twin)
- not-authorized: TwinNotAuthorized, TwinNotAuthorizedToUpdateContract, TwinNotAuthorizedToCancelContract
- contract-grace: CannotUpdateContractInGraceState; ContractNotInCreatedState (named by clients; no
                tfchain release raises it)
- chain-capacity: NotEnoughResourcesOnNode (raised only by the chain's capacity planning, reverted in
                tfchain #554; still in its error list)
- public-ip:    FarmHasNotEnoughPublicIPs (the farm has fewer IPs than asked at all),
                FarmHasNotEnoughPublicIPsFree (not that many free: the farm's pool is shared by all its nodes)

And ZOS's own words for what a VM carries: `required <N> ips while contract has <M> ip reserved` (the
contract reserved fewer public IPs than the VM's network asks: public-ip), `usage of GPU is not allowed
unless node is rented` (gpu).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

from dashboard.capacity import GiB
from dashboard.grid import zos_words

CAUSES = (
    "memory",
    "disk",
    "validation",
    "node-offline",
    "grid-unavailable",
    "node-closed",
    "not-authorized",
    "contract-grace",
    "chain-capacity",
    "public-ip",
    "gpu",
    # The node lost its zos-cache subvolume: ZOS refuses every workload there (zos#2043).
    "cache-missing",
    # A full VM's image hit the zos-cache's quota: transient, the cache grows (zos#2147).
    "cache-full",
    "unknown",
)
# The model stores the numbers in BigIntegerField; anything larger is not a real byte count.
_MAX_BYTES = 2**63 - 1
# Plenty for any real error chain; keeps a pasted log from costing anything.
_MAX_INPUT = 64 * 1024


@dataclass(frozen=True)
class Diagnosis:
    cause: str  # one of CAUSES (the Deployment.Cause values)
    reason: str  # ZOS's own reason, unwrapped; the raw text when nothing is known
    words: str  # for support staff, in plain language: what happened, the numbers in GiB, what to do
    needed_bytes: int | None = None  # memory: the VM's memory; disk: the disk that did not fit
    usable_bytes: int | None = None  # memory: what ZOS said was usable
    workload: str | None = None  # the workload the Go deployer named
    deployment_id: int | None = None
    detail: str = ""  # for an engineer: which tool dropped what, where to read more ("" when the words say it all)
    chain_error: str = ""  # the TFChain module error's name, when the chain refused the contract

    def as_dict(self) -> dict:
        return asdict(self)


_GO_WRAPPER = re.compile(
    r"\bwork(?:load|laod) (?P<workload>\S+) (?:state )?within deployment (?P<deployment>\d+) "
    r"(?:failed with error|is deleted|is paused|was not updated): ?(?P<reason>.*)",
    re.IGNORECASE | re.DOTALL,
)
_MEMORY = re.compile(
    r"cannot fulfil required memory size(?: (?P<needed>\d+) bytes out of usable (?P<usable>\d+) bytes)?",
    re.IGNORECASE,
)
_VDISK = re.compile(r"failed to find a candidate to host vdisk of size '?(?P<size>\d+)'?", re.IGNORECASE)
_ROOTFS = re.compile(r"failed to create vm rootfs", re.IGNORECASE)
_NO_SPACE = re.compile(
    r"not enough space left in pools of this type (?P<kind>\w+)|no space left on device", re.IGNORECASE
)
_MIN_MEMORY = re.compile(r"mem capacity can'?t be less th(?:at|an) 250M", re.IGNORECASE)
_MIN_ROOTFS = re.compile(r"disk size can'?t be less th(?:at|an) (?P<size>\d+)", re.IGNORECASE)
_NO_CPU = re.compile(r"cpu capa?city can'?t be 0", re.IGNORECASE)
_ERROR_STATE = re.compile(r"deployment entered error state", re.IGNORECASE)
_AWAY = re.compile(
    r"with status:\s*(?:down|standby)\b"
    r"|\bnode \d+ is (?:down|on standby|standby|offline|not reachable|unreachable)\b"
    r"|\bnode (?:is )?(?:down|offline|unreachable|not reachable)\b"
    r"|\bis not on the (?:simulated )?grid\b"
    r"|\bnode not found\b",
    re.IGNORECASE,
)
_UNAVAILABLE = re.compile(
    r"timed? ?out|time-out|deadline exceeded|connection (?:refused|reset|aborted|closed)"
    r"|could not connect|failed to establish a new connection|max retries exceeded"
    r"|name resolution|name or service not known|\bis unavailable\b|service unavailable|bad gateway"
    r"|gateway time|internal server error|\bthe grid proxy (?:answered|could not)\b"
    r"|\bEOF\b|broken pipe|network is unreachable",
    re.IGNORECASE,
)


def classify(raw: object) -> Diagnosis:
    """Diagnose a raw failure message (any text; None and garbage give `unknown`)."""
    text = _as_text(raw)
    if not text:
        return Diagnosis(
            cause="unknown",
            reason="",
            words="No error text was recorded for this failure; check the node's status and run the precheck "
            "to see whether memory or disk is short before deploying again.",
        )
    workload, deployment_id, reason = _unwrap(text)
    found = dict(workload=workload, deployment_id=deployment_id)

    chain = _CHAIN.search(reason)
    if chain:  # the chain refused the contract: ZOS never saw the VM
        return _chain_diagnosis(chain, reason, found)
    carried = _IPS_RESERVED.search(reason) or _GPU_NOT_RENTED.search(reason)
    if carried:
        return _carried_diagnosis(carried, reason, found)
    missing = zos_words.CACHE_MISSING.search(reason)
    if missing:  # before memory: ZOS says it inside "failed to satisfy required capacity: ..."
        return Diagnosis(
            cause="cache-missing",
            reason=_from(reason, "failed to satisfy", missing),
            words=zos_words.CACHE_MISSING_WORDS,
            detail=zos_words.CACHE_MISSING_DETAIL,
            **found,
        )

    sized = _size_diagnosis(reason, found)
    if sized is not None:
        return sized
    elsewhere = zos_words.elsewhere_word(reason)
    if elsewhere is not None:
        word, match = elsewhere
        return Diagnosis(
            cause=word.cause,
            reason=zos_words.reason_from(reason, match, word.wrap),
            words=word.words,
            detail=f"ZOS's words from {word.source}.",
            **found,
        )
    return _delivery_diagnosis(reason, found)


def _size_diagnosis(reason: str, found: dict) -> Diagnosis | None:
    """ZOS refused the VM's size: memory, disk, or a size below its minimums; None when it did not say so."""
    memory = _MEMORY.search(reason)
    if memory:
        needed, usable = _bytes(memory.group("needed")), _bytes(memory.group("usable"))
        return Diagnosis(
            cause="memory",
            reason=_from(reason, "failed to satisfy", memory),
            words=_memory_words(needed, usable),
            detail=_MEMORY_DETAIL if needed is not None and usable is not None else "",
            needed_bytes=needed,
            usable_bytes=usable,
            **found,
        )
    full = zos_words.CACHE_FULL.search(reason)
    if full:
        return Diagnosis(
            cause="cache-full",
            reason=_flist_reason(reason, full),
            words=zos_words.cache_full_words(),
            detail=zos_words.CACHE_FULL_DETAIL,
            **found,
        )
    vdisk, rootfs, no_space = _VDISK.search(reason), _ROOTFS.search(reason), _NO_SPACE.search(reason)
    if (vdisk or rootfs) and not no_space and zos_words.elsewhere_word(reason) is not None:
        return None  # a rootfs or vdisk refused for a fault of the node, not for room (zos_words)
    if vdisk or rootfs or no_space:
        size = _bytes(vdisk.group("size")) if vdisk else None
        start = vdisk or rootfs or no_space
        return Diagnosis(
            cause="disk",
            reason=reason[start.start() :].strip(),
            words=_disk_words(size, bool(rootfs and not vdisk)),
            needed_bytes=size,
            **found,
        )
    return _validation_diagnosis(reason, found)


def _validation_diagnosis(reason: str, found: dict) -> Diagnosis | None:
    """ZOS refused the request itself (its size or shape), before or while starting it: not the node's room."""
    cpu = zos_words.VM_CPU.search(reason)
    if cpu:
        return Diagnosis(
            cause="validation",
            reason=zos_words.reason_from(reason, cpu, _VMD_WRAP),
            words=zos_words.cpu_words(cpu),
            detail=zos_words.VM_CPU_DETAIL,
            **found,
        )
    validation = _MIN_MEMORY.search(reason) or _MIN_ROOTFS.search(reason) or _NO_CPU.search(reason)
    if validation:
        return Diagnosis(
            cause="validation",
            reason=reason[validation.start() :].strip(),
            words=_validation_words(validation),
            **found,
        )
    table = zos_words.validation_word(reason)
    if table is not None:
        word, match = table
        return Diagnosis(
            cause="validation",
            reason=zos_words.reason_from(reason, match, word.wrap),
            words=word.words,
            detail=f"ZOS's words from {word.source}.",
            **found,
        )
    return None


_VMD_WRAP = re.compile(r"machine configuration validation failed: ", re.IGNORECASE)
# ZOS's own outermost words on the flist path (primitives/vm/vm.go, utils.go), where a cache refusal starts.
_FLIST_START = re.compile(r"failed to mount flist|failed to write image to disk|failed to mount cloud container", re.I)


def _flist_reason(reason: str, match: re.Match) -> str:
    start = _FLIST_START.search(reason[: match.start()])
    return reason[start.start() if start else match.start() :].strip()


def _delivery_diagnosis(reason: str, found: dict) -> Diagnosis:
    """The request did not get through, or its failure came back without a reason the dashboard knows."""
    if _AWAY.search(reason):
        return Diagnosis(cause="node-offline", reason=reason, words=_away_words(reason), **found)
    if _UNAVAILABLE.search(reason):
        return Diagnosis(
            cause="grid-unavailable",
            reason=reason,
            words="The grid could not be reached in time (a time-out or a connection error), so the node may "
            "never have seen the request; retry later, and if it keeps failing check GRID_PROXY_URL and the network.",
            **found,
        )
    error_state = _ERROR_STATE.search(reason)
    given = reason[error_state.end() :].strip(" \t\n:;,.-") if error_state else ""
    if given:
        # A client that passes ZOS's reason on after the wrapper: the reason is said, never "not passed on".
        return Diagnosis(
            cause="unknown",
            reason=given,
            words=f"The VM could not be started on the node; the reason given after 'entered error state' is "
            f"\u201c{given}\u201d, which is not one of the failures the dashboard knows (memory, disk, validation, node "
            "offline, grid unreachable). Run the precheck on the node; if it says the slice fits, pass this reason to "
            "an engineer.",
            detail="The reason follows the Rust grid client's wrapper; read it with the node's own record of the "
            "workload's error (its deployment changes, e.g. with tfcmd or the Go grid-client).",
            **found,
        )
    if error_state:
        return Diagnosis(
            cause="unknown",
            reason=reason,
            words="The VM could not be started on the node, and the tool that asked for it did not pass on why. "
            "The usual cause is that the node is short of memory or disk: run the precheck on the node; if it says "
            "the slice fits, ask an engineer to look at the node's own record of the error.",
            detail="The Rust grid client reported only 'vm deployment entered error state' and dropped ZOS's reason; "
            "read the workload's error on the node (its deployment changes, e.g. with tfcmd or the Go grid-client).",
            **found,
        )
    return Diagnosis(
        cause="unknown",
        reason=reason,
        words="This is not an error the dashboard knows. Run the precheck on the node to rule out a shortage of "
        "memory or disk; if it says the slice fits, pass the raw error to an engineer.",
        detail="Matches none of the known ZOS failures (memory, disk, validation, node offline, grid unreachable); "
        "read the raw error and the node's logs.",
        **found,
    )


# --- the chain's refusals ------------------------------------------------------------------------

_CHAIN = re.compile(
    r"(?:\bsmartContractModule\.)?\b(?P<name>NodeNotAvailableToDeploy|TwinNotAuthorized(?:ToUpdateContract|ToCancelContract)?"
    r"|ContractNotInCreatedState|CannotUpdateContractInGraceState|NotEnoughResourcesOnNode"
    r"|FarmHasNotEnoughPublicIPs(?:Free)?)\b"
)
_CHAIN_NODE = re.compile(r"contract on node (?P<node>\d+)", re.IGNORECASE)
_CHAIN_CAUSES = {
    "NodeNotAvailableToDeploy": "node-closed",
    "TwinNotAuthorized": "not-authorized",
    "TwinNotAuthorizedToUpdateContract": "not-authorized",
    "TwinNotAuthorizedToCancelContract": "not-authorized",
    "ContractNotInCreatedState": "contract-grace",
    "CannotUpdateContractInGraceState": "contract-grace",
    "NotEnoughResourcesOnNode": "chain-capacity",
    "FarmHasNotEnoughPublicIPs": "public-ip",
    "FarmHasNotEnoughPublicIPsFree": "public-ip",
}
_IPS_RESERVED = re.compile(r"required (?P<needed>\d+) ips? while contract has (?P<reserved>\d+) ips? reserved", re.I)
_GPU_NOT_RENTED = re.compile(r"usage of GPU is not allowed unless node is rented", re.I)


def _carried_diagnosis(match: re.Match, reason: str, found: dict) -> Diagnosis:
    """ZOS refused for what the VM carries: its public IPs (the contract reserved fewer), or a GPU off rent."""
    if match.re is _GPU_NOT_RENTED:
        return Diagnosis(
            cause="gpu",
            reason=reason[match.start() :].strip(),
            words="ZOS refused the GPU: a VM may use a node's GPU only while the node is rented, and the marketplace "
            "does not rent this node. Rent the node first (a GPU slice is offered only on a node the marketplace "
            "rents), or deploy the slice without its GPU.",
            detail="zos pkg/primitives/vm: GPU devices are given to a VM only on a rented node (the deployer's twin "
            "holds its rent contract); the proxy lists each GPU with the contract holding it (gpus[].contract).",
            **found,
        )
    needed, reserved = match.group("needed"), match.group("reserved")
    return Diagnosis(
        cause="public-ip",
        reason=reason[match.start() :].strip(),
        words=f"ZOS refused the VM's network: it asks {needed} public IPv4 but its contract reserved {reserved}. "
        "The farm's IPs were taken between the check and the deploy; the dashboard reads the farm's IPs again at "
        "once. Deploy it in a farm with a free IP, or without the IP.",
        detail="zos pkg/primitives/pubip: the public IPs of a deployment must be reserved by its node contract "
        "(create_node_contract public_ips = N takes N of the farm's free IPs).",
        **found,
    )


def _chain_diagnosis(match: re.Match, reason: str, found: dict) -> Diagnosis:
    name = match.group("name")
    node = _CHAIN_NODE.search(reason)
    where = f"node {node.group('node')}" if node else "the node"
    cause = _CHAIN_CAUSES[name]
    words, detail = _CHAIN_WORDS[cause]
    return Diagnosis(
        cause=cause,
        reason=name,
        words=words.format(where=where),
        detail=f"TFChain refused the contract with {name}. " + detail,
        chain_error=name,
        **found,
    )


_CHAIN_WORDS = {
    "node-closed": (
        "The chain refused to create the VM's contract: {where} is not available to the marketplace. "
        "Either it is on standby (or being switched off), or another twin rents it, or it is kept for a renter "
        "(a dedicated farm or an extra fee) and the marketplace holds no rent contract on it. The node page says "
        "which; pick another node, or rent this one first. ZOS never saw the VM and nothing is to be cleaned up.",
        "tfchain pallet-smart-contract _create_node_contract raises NodeNotAvailableToDeploy for a node whose power "
        "is down or switched down, a rented node when the deploying twin is not the renter, and a dedicated node "
        "(farm dedicated or extra fee) with no rent contract. Check MARKETPLACE_TWIN_ID and the node's rent contract.",
    ),
    "not-authorized": (
        "The chain refused: the twin the marketplace signs with does not own that contract, so it may not change "
        "or cancel it. The contract belongs to someone else (or the marketplace signed with the wrong account); "
        "ask an engineer to check which twin owns it.",
        "TwinNotAuthorizedToUpdateContract / TwinNotAuthorizedToCancelContract are raised when the signing account "
        "is not the contract's twin; TwinNotAuthorized by service contracts. Compare the signer with MARKETPLACE_TWIN_ID.",
    ),
    "contract-grace": (
        "The chain refused: the contract is in its grace period (its twin's balance could not pay it), and a "
        "contract in grace cannot be changed. On {where} the marketplace's VMs stay stopped until the account is "
        "funded again; tell the marketplace's operators to top up the twin, then retry.",
        "CannotUpdateContractInGraceState is raised by _update_node_contract for a contract in GracePeriod; a rent "
        "contract in grace puts the node's contracts in grace too. ContractNotInCreatedState is a client's name for "
        "the same state; no tfchain release raises it.",
    ),
    "public-ip": (
        "The chain refused to create the VM's contract: the farm of {where} has no free public IPv4 to give it. "
        "A farm's IPs are one pool for all its nodes, so another deploy on any of them may have taken the last; "
        "the dashboard reads the farm's IPs again at once. Deploy it in another farm, sell it without the IP, or "
        "ask the farmer to add IPs. ZOS never saw the VM.",
        "tfchain pallet-smart-contract _reserve_ip: FarmHasNotEnoughPublicIPs when the farm has fewer IPs than the "
        "contract's public_ips at all, FarmHasNotEnoughPublicIPsFree when fewer are free (contract_id 0). The proxy "
        "lists them: GET /farms?farm_id=F (publicIps) and GET /public_ips?farm_ids=F&free=true.",
    ),
    "chain-capacity": (
        "The chain refused: by its own records {where} does not have the capacity the contract asks for. The "
        "node's figures on the grid are full; run the precheck and pick another node.",
        "NotEnoughResourcesOnNode was raised by the chain's capacity planning (tfchain, reverted in #554); a chain "
        "that raises it keeps its own count of the node's resources.",
    ),
}


def _as_text(raw: object) -> str:
    if raw is None:
        return ""
    if isinstance(raw, (bytes, bytearray)):
        raw = bytes(raw[:_MAX_INPUT]).decode("utf-8", errors="replace")
    elif not isinstance(raw, str):
        try:
            raw = str(raw)
        except Exception:
            return ""
    return raw[:_MAX_INPUT].replace("\x00", "").strip()


def _unwrap(text: str) -> tuple[str | None, int | None, str]:
    """The Go deployer's wrapper; the innermost one wins when wrappers are nested."""
    workload = deployment_id = None
    reason = text
    while True:
        match = _GO_WRAPPER.search(reason)
        if not match:
            break
        workload, deployment_id = match.group("workload"), _bytes(match.group("deployment"))
        reason = match.group("reason").strip()
    return workload, deployment_id, reason


def _from(reason: str, marker: str, match: re.Match) -> str:
    """ZOS's reason from its own first words (drops wrappers such as 'error waiting deployment: ')."""
    start = re.search(re.escape(marker), reason[: match.start()], re.IGNORECASE)
    return reason[start.start() if start else match.start() :].strip()


def _bytes(digits: str | None) -> int | None:
    if digits is None or len(digits) > 19:
        return None
    value = int(digits)
    return value if value <= _MAX_BYTES else None


def _gib(n: int) -> str:
    return f"{n / GiB:.2f} GiB"


_MEMORY_DETAIL = (
    "If the Grid Proxy showed room, memory really in use on the host is above ZOS's accounting "
    "(hidden use per running VM); the refusal is kept as an observation and the precheck counts it."
)


def _memory_words(needed: int | None, usable: int | None) -> str:
    if needed is not None and usable is not None:
        short = f", short by {_gib(needed - usable)}" if needed > usable else ""
        return (
            f"ZOS refused the VM for memory: it needs {_gib(needed)} but only {_gib(usable)} is usable on the node"
            f"{short}; the catalog offers a slice the node cannot hold, so re-register the node to drop phantom slices."
        )
    return (
        "ZOS refused the VM for memory (it did not say how much was usable); run the precheck and re-register the "
        "node to drop phantom slices."
    )


_STANDBY = re.compile(r"\bstandby\b", re.IGNORECASE)
_GONE = re.compile(r"\bis not on the (?:simulated )?grid\b|\bnode not found\b", re.IGNORECASE)
_DOWN = re.compile(r"\b(?:down|offline|unreachable|not reachable)\b", re.IGNORECASE)


def _away_words(reason: str) -> str:
    """Words that match the node's state as the refusal names it: a standby node is woken, not repaired."""
    if _STANDBY.search(reason):
        return (
            "The node is on standby (switched off by its farm's power manager), so ZOS could not take the VM; "
            "it can take it once it is woken: deploy again then, or pick a node that is up."
        )
    if _GONE.search(reason):
        return "The node is no longer on the grid, so ZOS could not take the VM; pick another node."
    if _DOWN.search(reason):
        return (
            "The node is down, so ZOS could not take the VM; deploy again once it is up again "
            "(check the node's status on its page), or pick another node."
        )
    return (
        "The node is down, on standby or no longer on the grid, so ZOS could not take the VM; "
        "check the node's status on its page and deploy again once it is up (or pick another node)."
    )


def _disk_words(size: int | None, rootfs: bool) -> str:
    if size is not None:
        return (
            f"ZOS could not place the {_gib(size)} data disk: no single SSD pool on the node has that much free "
            "(ZOS puts each disk whole into one pool, not across the node's total); re-register the node so its "
            "slices fit its pools, or free a disk first."
        )
    if rootfs:
        return (
            "ZOS could not create the VM's root filesystem: the node's SSD pools are full; re-register the node to "
            "drop phantom slices, or free a disk first."
        )
    return "ZOS ran out of SSD space in the node's pools; re-register the node to drop phantom slices, or free a disk first."


def _validation_words(match: re.Match) -> str:
    if match.re is _MIN_ROOTFS:
        size = _bytes(match.group("size"))
        minimum = _gib(size) if size is not None else "ZOS's minimum"
        return (
            f"ZOS rejected the VM before deploying it: its root filesystem must be at least {minimum} (or 0 for the "
            "minimum); fix the rootfs size in the policy and deploy again."
        )
    if match.re is _NO_CPU:
        return "ZOS rejected the VM before deploying it: it needs at least one vCPU; fix the slice size in the policy."
    return (
        "ZOS rejected the VM before deploying it: its memory is below ZOS's minimum of 0.24 GiB (250 MiB); fix the "
        "slice size in the policy and deploy again."
    )


__all__ = ["CAUSES", "Diagnosis", "classify"]
