"""Running studies: the coordinator state machine (`coordinator`), the service's scheduler over
many studies (`scheduler`), the operations the API and the CLI share (`operations`), the
recommendation with its evidence (`recommend`), the JSON views (`views`) and exports (`export`).
"""
