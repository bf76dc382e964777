"""The release: how a candidate is deployed beside what serves, judged, and promoted or rolled back.

One package for the whole lifecycle, in layers (each module imports only those below it):

- :mod:`~raylift.release.rollback` — the one undo of a release (canary, direct, or after a failure);
- :mod:`~raylift.release.canary` — the canary and its fresh baseline arm: names, deploy, promote, clean-up;
- :mod:`~raylift.release.rollout` — a new config applied to the serving app with surge, old replicas kept until
  the new ones run;
- :mod:`~raylift.release.writer` (the Serve config writes, under the cluster lease) and
  :mod:`~raylift.release.state` (the release records: anchor, last good, history, in the model store);
- :mod:`~raylift.release.gates` (the SLO gates on a benchmark result) and :mod:`~raylift.release.decision`
  (pure: promote, roll back or hold, from the evidence; the one owner of that decision).

Operators in :mod:`raylift.operators` carry the steps out; Serve-config knowledge lives in :mod:`raylift.serve`.
The face below is the decision's, which needs no Ray, Airflow or I/O.
"""

from raylift.release.decision import (
    HOLD,
    PROMOTE,
    ROLL_BACK,
    ReleaseDecision,
    ReleaseEvidence,
    decide,
)

__all__ = ["HOLD", "PROMOTE", "ROLL_BACK", "ReleaseDecision", "ReleaseEvidence", "decide"]
