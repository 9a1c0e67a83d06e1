"""Pure functions over values, with no database, file or clock: argument checks, the
plugin-response codec, CDI names, the run-option merge, the history's hash-chain rule, time
values and password masking.

Internal: the public names are re-exported by ``podstore/__init__.py``; code outside the
package should not import these modules.
"""
