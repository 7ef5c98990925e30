"""What surrounds a stage and never changes what it writes: MLflow tracking, progress bars,
error messages, the stage wrapper. No stage lists this folder as a DVC dependency."""
