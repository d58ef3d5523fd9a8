"""Built-in demo pipelines, written with the public API only."""

from ._refund import refund_cases as refund_cases
from ._refund import refund_pipeline as refund_pipeline
from ._refund import refund_tables as refund_tables
