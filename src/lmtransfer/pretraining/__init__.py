"""Language-model pretraining, shared by both tasks: the loop, its objectives and samples."""
