"""What the pricing app tells the apps above it: ``gpu_price_changed`` is sent, inside the change's
transaction, after a GPU price was created, changed or deleted, with ``change`` (the PriceChange).
The ledger books what it changes in closed months (``apps.ledger.closing.price_changed``)."""

from django.dispatch import Signal

gpu_price_changed = Signal()
