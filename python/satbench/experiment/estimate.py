"""How long a trial will take: a model for planning, good to tens of percent.

The link's numbers are the emulator's own (:class:`~satbench.link.spec.LinkSpec`):
its base RTT, its long-run forward rate and the probability that it loses a
full-size packet. The model adds the harness's overhead, handshakes and
requests in round trips, slow start from an initial window of 10 segments
up to the bandwidth-delay product, the transfer at the rate, and for
loss-based senders the Mathis rate under random loss, blended in by the
expected number of losses (a few losses hardly shrink the window).
"""

from __future__ import annotations

import math

from ..endpoints import pages
from ..link.spec import LinkSpec
from ..model import ClientKind, Protocol
from ..path import element_class
from ..workloads import workload_of
from . import population
from .trialspec import TrialSpec

#: Harness overhead per trial (testbed build and teardown, server start, client
#: start), without the LCP wait, as measured on a 2-core machine, per client kind:
#: :attr:`satbench.model.ClientKind.overhead_s`.
OVERHEAD_S = {k.value: k.overhead_s for k in ClientKind}
#: Browsers wait this long after the load for LCP to settle.
LCP_SETTLE_S = 0.3

#: Sizes of the pages that are not study A's exact ones, as the generator
#: makes them (seed 1): (total bytes with the HTML, objects). A test checks
#: them against freshly generated pages.
GENERATED_PAGES = {"blank": (115, 0), "flags": (72_342, 200), "images640": (672_841, 640), "shop": (2_464_106, 173),
                   "visual": (1003, 0), "script": (307, 0)}
#: The realtime page's HTML; its one object is the client script, whatever its size is now.
REALTIME_HTML_BYTES = 216

#: Loss response per sender, as the constant C of the Mathis et al. rate
#: C * MSS / (RTT * sqrt(p)), fitted to trials over GEO with BER 1e-5
#: (`satbench bench harness` checks the plan against real trials). Linux BBR
#: (v1) does not slow down for random loss: None.
MATHIS_C = {("tcp", "cubic"): 1.22, ("tcp", "reno"): 1.22, ("tcp", "bbr"): None,
            ("quic", "cubic"): 2.5, ("quic", "reno"): 2.5, ("quic", "bbr"): 9.8}

MSS = 1448


#: Seconds a browser of a population takes to get ready (driver and browser launched; they launch together).
BROWSER_READY_S = 0.8


#: The HTML of study A's pages (one image, or eight), about: the generator's own sizes are 288 and 677 bytes.
STUDY_A_HTML_BYTES = {True: 290, False: 680}


def page_bytes(page: str) -> tuple[int, int]:
    """(total bytes, objects after the HTML) of a page, from its definition."""
    if page.startswith("bulk:"):
        return pages.parse_size(page[5:]), 0
    if (up := pages.upload_size(page)) is not None:
        return up, 0
    if page in pages.STUDY_A or page == pages.FIRST_WINDOW:
        structure, label = page.split("-")
        single = structure == "single"
        return pages.SIZES_KB[label] * pages.KB + STUDY_A_HTML_BYTES[single], 1 if single else 8
    if page == "realtime":
        return REALTIME_HTML_BYTES + len(pages.realtime_script()), 1
    return GENERATED_PAGES[page]


def trial_s(ts: TrialSpec, link: LinkSpec) -> float:
    """A model of one trial's duration over ``link``."""
    client = ts.client.value
    mix = ts.population
    if mix is None:
        return _trial_s(ts, link, ts.protocol or Protocol.H2, client)
    # A population lasts as long as its slowest group: the load of each group's protocol with every
    # client sharing the link (HTTP/1.1's many round trips on a clean link, HTTP/2's one connection
    # under loss), and its heaviest kind's overhead.
    client = "chromium" if any(g.kind.value == "chromium" for g in mix) else (
        "firefox" if any(g.kind.value == "firefox" for g in mix) else "loader")
    return max(_trial_s(ts, link, g.protocol, client) for g in mix if g.n > 0)


def _trial_s(ts: TrialSpec, link: LinkSpec, proto: Protocol, client: str) -> float:
    rtt = link.base_rtt_ms / 1000
    # An upload's bytes take the return link.
    way = link.ret if ts.upload_bytes is not None else link.forward
    rate = way.mean_mbps
    p_loss = way.packet_loss_1500
    total, n_objects = workload_of(ts).size(ts) or page_bytes(ts.page)
    mix = ts.population
    clients = ts.clients
    handshake = 1 if proto is Protocol.H3 else 2
    rounds = handshake + 1  # + the HTML request
    conns = 1
    if n_objects:
        conns = 1 if proto is not Protocol.H1 else min(n_objects, ts.connections)
        if proto is Protocol.H1:
            rounds += math.ceil(n_objects / conns)  # one request per object per connection
            if conns > 1:
                rounds += handshake
        else:
            rounds += 1
    cwnd_bytes = 10 * MSS * conns
    bits = total * clients * 8
    # Slow start doubles the window each round trip up to the path's
    # bandwidth-delay product (shared by the clients); the rest goes at the rate.
    bdp = rate * 1e6 * rtt / 8 / clients if rate else float("inf")
    ss_bytes = min(total, bdp)
    ss_rounds = math.ceil(math.log2(ss_bytes / cwnd_bytes + 1)) if ss_bytes > cwnd_bytes else 0
    transfer = ss_rounds * rtt + (max(0.0, total - 2 * ss_bytes) * clients * 8 / (rate * 1e6) if rate else 0.0)
    if rate:
        transfer = max(transfer, bits / (rate * 1e6))
    c = MATHIS_C.get(("quic" if proto is Protocol.H3 else "tcp", ts.cc.value))
    if p_loss > 0 and rtt > 0:
        if c is None:
            # Losses are repaired a round trip later; the last ones cost a tail-loss probe,
            # and with many losses recovery rounds add up.
            expected = total / MSS * p_loss
            rounds += 2 + math.ceil(expected / 40) if expected >= 1 else 0
        else:
            # The Mathis rate is a steady state: it holds once losses are many.
            # With few, the window hardly shrinks; blend by the expected count.
            mathis = c * MSS * 8 / (rtt * math.sqrt(p_loss)) * conns * clients
            after_first_window = max(0.0, bits - cwnd_bytes * 8 * clients)
            lossy = after_first_window / min(mathis, rate * 1e6 if rate else mathis)
            w = min(1.0, total / MSS * p_loss / 10)
            transfer = max(transfer, (1 - w) * transfer + w * lossy)
    t = rounds * rtt + transfer + OVERHEAD_S.get(str(client), 0.5)
    if ClientKind(str(client)).browser:
        t += LCP_SETTLE_S
    if ts.view == "repeat":  # the page twice, and the pause between
        t = 2 * t + 0.5
    t += workload_of(ts).extra_s(ts, rtt)
    t += sum(element_class(f).extra_s(v) for f, v in ts.path.items())
    if mix is not None:  # every client prepares before the barrier (browsers start their drivers and launch)
        t += population.RELEASE_LEAD_S + (clients * BROWSER_READY_S if client != "loader"
                                          else clients * population.RELEASE_LEAD_PER_LOADER_S)
    return t
