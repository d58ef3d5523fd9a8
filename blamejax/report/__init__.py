"""Reports: plain-text tables, JSON-ready dicts, a pandas export and a self-contained HTML
page of batch results.
"""

from ._batch import CAVEAT as CAVEAT
from ._batch import batch_dataframe as batch_dataframe
from ._batch import batch_html as batch_html
from ._batch import batch_table as batch_table
from ._batch import batch_to_dict as batch_to_dict
from ._text import number as number
from ._text import step_rows as step_rows
