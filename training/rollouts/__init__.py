"""Where a step's rollouts, rewards and weight sync run: the executors (this process, Ray), the budgeted executor
that prices and caps the reward calls, and the pipeline that rolls out ahead (asynchronous RL)."""
