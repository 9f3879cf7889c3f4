import './base.css';
import './logs.css';
