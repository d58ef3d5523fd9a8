"""Reports: plain-text tables, JSON-ready dicts, a pandas export and a self-contained HTML
page of batch results; strict JSON for every result, and atomic writes of every file.

Strict JSON: NaN is written as `null`, +inf and -inf as the strings `"inf"` and `"-inf"`,
arrays as nested lists with their dtype and shape under `"arrays"`, and the class under
`"type"`; no bare `NaN`/`Infinity` token is ever written. Every result has `to_dict()`,
`to_json(path)`, and the classmethods `from_dict(d)` and `load_json(path)` that give back
an equal result.
"""

from ._batch import CAVEAT as CAVEAT
from ._batch import TIE_TOLERANCE as TIE_TOLERANCE
from ._batch import batch_dataframe as batch_dataframe
from ._batch import batch_html as batch_html
from ._batch import batch_html_fragment as batch_html_fragment
from ._batch import batch_table as batch_table
from ._batch import batch_to_dict as batch_to_dict
from ._batch import largest_blame as largest_blame
from ._batch import step_order as step_order
from ._chart import batch_chart as batch_chart
from ._interactive import interactive_html as interactive_html
from ._interactive import interactive_reduction as interactive_reduction
from ._json import JSONExport as JSONExport
from ._json import json_ready as json_ready
from ._json import read_json as read_json
from ._json import result_from_dict as result_from_dict
from ._json import result_to_dict as result_to_dict
from ._json import write_atomic as write_atomic
from ._json import write_json as write_json
from ._plots import plot_batch as plot_batch
from ._text import number as number
from ._text import step_rows as step_rows
