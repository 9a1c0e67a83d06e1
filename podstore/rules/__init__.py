"""Pure rules: argument checks, the plugin-response codec, CDI names, run-option merging, times.

Nothing here touches a database or a file. Internal: the public names are re-exported by
``podstore/__init__.py``; code outside the package should not import these modules.
"""
