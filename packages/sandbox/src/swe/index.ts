// SWE-smith prep: dataset rows to tasks, setup, patch capture, hidden-test restore, log parsing, grading.
export {};
