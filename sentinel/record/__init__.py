"""The record of the current server: the ledger, its observers, and freezing it into evidence.

:mod:`.ledger` is what sentinel has seen of the current server, fed by the
periodic loops of :mod:`.observers` and the features they drive (auto-sleep,
fault tolerance, KV transfers, reachability); :mod:`.freeze` turns it into the
verdict's evidence at one instant. Below the ledger sit the parts that know
nothing of it: evidence providers (:mod:`.provider`), the lifecycle phase,
departures, refusals and the elastic EP gate (``.importlinter``'s record
contract orders them; docs/layout.md says what each module owns).

The face holds the names other packages use whose modules load nothing beyond
sentinel's own. The ledger, the observers and the features are left out and
imported from their modules: they load httpx, psutil and the canary kinds.
"""

from sentinel.record.departures import departures_json, not_answering
from sentinel.record.provider import Provider, fragments, gather

__all__ = ["Provider", "departures_json", "fragments", "gather", "not_answering"]
