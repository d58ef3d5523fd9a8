"""Built-in demo pipelines, written with the public API only."""

from ._agent8 import agent8_cases as agent8_cases
from ._agent8 import agent8_pipeline as agent8_pipeline
from ._agent8 import agent8_tables as agent8_tables
from ._car import interaction_analytic as interaction_analytic
from ._car import interaction_cases as interaction_cases
from ._car import interaction_pipeline as interaction_pipeline
from ._car import interaction_tables as interaction_tables
from ._car import pivotal_analytic as pivotal_analytic
from ._car import pivotal_cases as pivotal_cases
from ._car import pivotal_pipeline as pivotal_pipeline
from ._car import pivotal_tables as pivotal_tables
from ._rag import ANSWER_OPTIONS as ANSWER_OPTIONS
from ._rag import RETRIEVE_OPTIONS as RETRIEVE_OPTIONS
from ._rag import REWRITE_OPTIONS as REWRITE_OPTIONS
from ._rag import VERIFY_OPTIONS as VERIFY_OPTIONS
from ._rag import rag_cases as rag_cases
from ._rag import rag_pipeline as rag_pipeline
from ._refund import refund_cases as refund_cases
from ._refund import refund_pipeline as refund_pipeline
from ._refund import refund_tables as refund_tables
