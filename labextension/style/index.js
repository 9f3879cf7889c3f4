import './base.css';
import './logs.css';
import './profile.css';
import './runs.css';
import './schedules.css';
