"""What surrounds a stage and never changes what it writes (so no DVC dependency): tracking, progress, errors."""
