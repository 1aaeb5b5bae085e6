"""The Sunway athread target: master and slave code, LDM planning and the cost
model of the SW26010 and SW26010-Pro core groups."""
