"""The environment `python3 -m gridtrain.launch` gives each process it starts (gridtrain/launch.py says what each
variable means); gridtrain.Node reads it."""

RANK = "GRIDTRAIN_RANK"
NODES = "GRIDTRAIN_NODES"
LISTEN = "GRIDTRAIN_LISTEN"
SEED = "GRIDTRAIN_SEED"
WAIT_MEMBERS = "GRIDTRAIN_WAIT_MEMBERS"
ADDRESS_FILE = "GRIDTRAIN_ADDRESS_FILE"
