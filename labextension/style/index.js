import './base.css';
import './logs.css';
import './runs.css';
import './schedules.css';
