"""What both tasks' training loops share: the optimizer and schedules, DDP, resuming, the fine-tune stages' start."""
