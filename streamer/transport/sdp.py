"""SDP and ICE helpers for the WebRTC transport: offer checks, mDNS candidates, codec choice.

`.local` (mDNS) candidates are stripped: aiortc resolves them by a 1 s mDNS lookup before it
answers (first frame at 1.3 s instead of 0.3 s, see shared/PROBES.md), and on loopback or a LAN
the browser also offers host/srflx candidates that work without it. Browsers that offer only
mDNS candidates still connect through aiortc's own candidates (peer-reflexive on our side).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from aiortc import RTCIceCandidate, RTCRtpSender
from aiortc.rtcrtpparameters import RTCRtpCodecCapability
from aiortc.sdp import candidate_from_sdp

MAX_SDP_BYTES = 64 * 1024
_CODEC_MIME = {"h264": "video/H264", "vp8": "video/VP8"}
_CANDIDATE_LINE = re.compile(r"^a=candidate:.*$", re.MULTILINE)


class SdpError(ValueError):
    """An offer or candidate we cannot use; `field` names the request field at fault."""

    def __init__(self, message: str, field: str = "sdp") -> None:
        super().__init__(message)
        self.field = field


def is_mdns(candidate_line: str) -> bool:
    parts = candidate_line.split()
    return len(parts) > 4 and parts[4].lower().endswith(".local")


def strip_mdns(sdp: str) -> str:
    """The SDP without `.local` candidate lines."""
    lines = sdp.splitlines()
    kept = [ln for ln in lines if not (ln.startswith("a=candidate:") and is_mdns(ln[2:]))]
    return "\r\n".join(kept) + "\r\n"


def check_offer(sdp: object) -> str:
    """Cheap structural checks before aiortc parses the offer; returns it with mDNS stripped."""
    if not isinstance(sdp, str):
        raise SdpError("sdp must be a string")
    if len(sdp) > MAX_SDP_BYTES:
        raise SdpError(f"sdp is over {MAX_SDP_BYTES} bytes")
    if not sdp.lstrip().startswith("v=0"):
        raise SdpError("sdp must start with v=0")
    if not re.search(r"^m=video ", sdp, re.MULTILINE):
        raise SdpError("the offer has no video m-line (add a recvonly video transceiver)")
    if "a=fingerprint:" not in sdp or "a=ice-ufrag:" not in sdp:
        raise SdpError("the offer lacks a DTLS fingerprint or ICE credentials")
    return strip_mdns(sdp)


def offered_codecs(sdp: str) -> set[str]:
    """Lower-case codec names in the offer's video rtpmap lines (e.g. {"h264", "vp8", "rtx"})."""
    return {m.lower() for m in re.findall(r"^a=rtpmap:\d+ ([A-Za-z0-9-]+)/90000", sdp, re.MULTILINE)}


def codec_preferences(sdp: str, preferred: str) -> tuple[str, list[RTCRtpCodecCapability]]:
    """The codec to send (preferred if offered, else the other one) and its capabilities + rtx."""
    offered = offered_codecs(sdp)
    order = [preferred] + [c for c in _CODEC_MIME if c != preferred]
    chosen = next((c for c in order if c in offered), None)
    if chosen is None:
        raise SdpError(f"the offer has neither H264 nor VP8 (offered: {sorted(offered)})")
    mime = _CODEC_MIME[chosen].lower()
    caps = RTCRtpSender.getCapabilities("video").codecs
    prefs = [c for c in caps if c.mimeType.lower() == mime] + [
        c for c in caps if c.mimeType.lower() == "video/rtx"
    ]
    return chosen, prefs


@dataclass(frozen=True)
class CandidateInit:
    """RTCIceCandidateInit as browsers send it (`candidate.toJSON()`)."""

    candidate: str
    sdpMid: str | None = None
    sdpMLineIndex: int | None = None


def to_ice_candidate(init: CandidateInit) -> RTCIceCandidate | None:
    """aiortc's candidate, or None for the ones we skip (empty = end of candidates, mDNS)."""
    line = init.candidate.strip()
    if line.startswith("a="):
        line = line[2:]
    if line.startswith("candidate:"):
        line = line[len("candidate:") :]
    if not line or is_mdns("candidate:" + line):
        return None
    if init.sdpMid is None and init.sdpMLineIndex is None:
        raise SdpError("a candidate needs sdpMid or sdpMLineIndex", "candidates")
    try:
        candidate = candidate_from_sdp(line)
    except (AssertionError, ValueError, IndexError) as exc:
        raise SdpError(f"bad candidate {init.candidate[:80]!r}: {exc}", "candidates") from None
    candidate.sdpMid = init.sdpMid
    candidate.sdpMLineIndex = init.sdpMLineIndex
    return candidate


def parse_sdpfrag(body: str) -> list[CandidateInit]:
    """Candidates of a WHEP trickle PATCH (`application/trickle-ice-sdpfrag`)."""
    out: list[CandidateInit] = []
    mid: str | None = None
    index = -1
    for line in body.splitlines():
        line = line.strip()
        if line.startswith("m="):
            index += 1
            mid = None
        elif line.startswith("a=mid:"):
            mid = line[len("a=mid:") :]
        elif line.startswith("a=candidate:"):
            out.append(CandidateInit(line[2:], mid, max(index, 0)))
    return out
