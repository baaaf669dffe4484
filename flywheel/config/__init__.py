"""The config tree (``tree.FlywheelConfig``, its sections in ``parts`` and the ``*_settings``
modules) and its loading from YAML with overrides (``loading``). It stands below every other part:
the ground's run view and tracker read it, and it imports no other part of the flywheel."""
