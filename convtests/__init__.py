"""Conversation tests (``flowdesk test``): YAML test cases that pin down how the agent must behave in a
conversation, run through the real graph, with a readable diff per failed step, JUnit XML and coverage
of each workflow's procedure.

- ``convtests.format``: the file format (pydantic models) and the loader (file:line:field errors);
- ``convtests.runner``: runs a case on a fresh thread with fresh tool state and checks each step;
- ``convtests.coverage``: which procedure steps, branches and APIs the cases exercised;
- ``convtests.junit``: JUnit XML;
- ``convtests.cli``: the ``flowdesk test`` command.
"""
