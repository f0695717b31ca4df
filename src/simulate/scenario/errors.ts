/** The scenario loader's typed errors: unreadable files, and scenarios that fail their schema or rules. */
import { ErrorCodes, InvalidInputError } from '../../common/errors.js';

/** ERR_BAD_SCENARIO: `details.path` is the file (or '<inline>'), `details.field` the JSON path of the field at fault. */
export class ScenarioError extends InvalidInputError {
  constructor(path: string, field: string, message: string) {
    super(ErrorCodes.BAD_SCENARIO, `scenario ${path}: ${field || '(root)'}: ${message}`, { path, field });
  }
}

/** ERR_SCENARIO_UNREADABLE: the file cannot be read, or is not JSON. */
export class ScenarioUnreadableError extends InvalidInputError {
  constructor(path: string, message: string) {
    super(ErrorCodes.SCENARIO_UNREADABLE, `scenario ${path}: ${message}`, { path });
  }
}
