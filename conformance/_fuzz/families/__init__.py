"""One module per case family; importing this package registers the mutation families.

Modules register in the order they are imported here, which is the order
families are listed, run and printed (so the imports are kept out of sorting).
The corpus (``fixtures``) and the schema-driven families (``schemathesis``)
take other inputs than a valid base, so they are called by name rather than
registered.
"""

# isort: off
from . import utf8, nfc, surrogates, integers, zero_fractions, digests  # noqa: F401 - imported to register
from . import identifiers, capture_shape, cross_references, instants, host_owned  # noqa: F401 - imported to register
from . import unknown_members, null, required, size, non_object  # noqa: F401 - imported to register
# isort: on
