/** SWE-smith's instance branch layout (`harness/gather.py`): the bug commit, then the removal of the F2P test files. */
export const BUG_PATCH_SUBJECT = 'Bug Patch';
export const REMOVE_TESTS_SUBJECT = 'Remove F2P Tests';
