"""The raw text a pipeline reads: the input files params.yaml names, and the line conventions every reader keeps."""
