"""The tags by which tracking finds its runs again in the store: the stage run (`tracking`), its pipeline run
(`pipeline_runs`) and the search for dead processes' runs (`orphan_runs`) all filter on them, so they live below
all three."""

TAG_PREFIX = "lmtransfer."
PARENT_TAG = "mlflow.parentRunId"
