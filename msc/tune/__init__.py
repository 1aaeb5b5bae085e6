"""msc.tune: the auto-tuner of schedule parameters, driven by a platform's
tuning space and cost model."""
