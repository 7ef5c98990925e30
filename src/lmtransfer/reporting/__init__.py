"""What the evaluate and plot stages of both tasks share: the fine-tuned models they read, statistics, figures."""
